"""S3Dataset against moto's server mode on 127.0.0.1 (through a proxy that can answer 503
SlowDown): exact bytes, templates, prefix listing, missing keys, ranges, caps, throttling,
credentials. No request leaves this machine: the credentials are fake, the endpoint local,
and botocore's instance-metadata lookup is off."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Iterator

import botocore.session
import pytest
from torch.utils.data import DataLoader

from tests.fixtures.loading import load_all
from tests.fixtures.servers import BUCKET, ODD_KEYS, SIZES, S3FaultProxy, aws_env, moto, payload
from torch_threadloader import ThreadLoader
from torch_threadloader.remote import (
    HttpStatusError,
    NotFoundError,
    RetriesExhaustedError,
    Retry,
    S3Dataset,
    TooLargeError,
)

FAST = Retry(max_retries=2, initial_backoff=0.001, max_backoff=0.01, jitter=0)
__all__ = ["aws_env", "moto"]  # fixtures used here


@pytest.fixture(scope="module")
def fault_proxy(moto) -> Iterator[S3FaultProxy]:
    srv = S3FaultProxy(moto.endpoint).start()
    yield srv
    srv.stop()


def s3(fault_proxy: S3FaultProxy, locations, **kwargs) -> S3Dataset:
    return S3Dataset(locations, endpoint_url=fault_proxy.url(""), retry=kwargs.pop("retry", FAST), **kwargs)


def test_exact_bytes_from_a_list(fault_proxy):
    ds = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{n:07d}.bin" for n in SIZES])
    assert load_all(ds, num_workers=2) == [payload(n) for n in SIZES]
    assert fault_proxy.total_requests() == len(SIZES)


def test_a_template_and_a_prefix_listing_give_the_same_items(fault_proxy):
    by_template = s3(fault_proxy, f"s3://{BUCKET}/train/{{i:04d}}.bin", columns={"i": range(5)})
    listed = S3Dataset.from_prefix(f"s3://{BUCKET}/train/", endpoint_url=fault_proxy.url(""), retry=FAST)
    assert [listed.locations[i] for i in range(len(listed))] == [by_template.locations[i] for i in range(5)]
    assert load_all(by_template) == load_all(listed) == [payload(100, salt=i) for i in range(5)]


def test_keys_that_need_quoting_are_signed_as_sent(fault_proxy):
    ds = s3(fault_proxy, [f"s3://{BUCKET}/{k}" for k in ODD_KEYS])
    assert load_all(ds) == [k.encode() for k in ODD_KEYS]


def test_a_missing_key_is_file_not_found_at_once(fault_proxy):
    ds = s3(fault_proxy, [f"s3://{BUCKET}/nope/missing.bin"])
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(NotFoundError) as info:
        next(iter(loader))
    assert isinstance(info.value, FileNotFoundError) and "NoSuchKey" in info.value.reason
    assert fault_proxy.total_requests() == 1


def test_a_ranged_read_returns_that_slice(fault_proxy):
    ds = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{300_000:07d}.bin"], byte_range=(1000, 1100))
    assert load_all(ds) == [payload(300_000)[1000:1100]]


def test_max_bytes_accepts_the_cap_and_refuses_more(fault_proxy):
    ok = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{1000:07d}.bin"], max_bytes=1000)
    assert load_all(ok) == [payload(1000)]
    over = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{300_000:07d}.bin"], max_bytes=1000)
    with ThreadLoader(over, batch_size=None) as loader, pytest.raises(TooLargeError) as info:
        next(iter(loader))
    assert info.value.size == 300_000


def test_throttling_is_retried(fault_proxy):
    fault_proxy.fail(2)
    ds = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{1000:07d}.bin"])
    assert load_all(ds) == [payload(1000)]
    assert fault_proxy.total_requests() == 3
    fault_proxy.fail(100)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(RetriesExhaustedError) as info:
        next(iter(loader))
    assert info.value.attempts == 3 and "503" in str(info.value.last_error)


def test_a_bad_credential_is_a_clear_error_not_a_retry_loop(fault_proxy, moto):
    moto.set_auth(True)
    try:
        ds = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{1000:07d}.bin"])
        with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(HttpStatusError) as info:
            next(iter(loader))
    finally:
        moto.set_auth(False)
    assert info.value.status == 403 and "InvalidAccessKeyId" in info.value.reason
    assert fault_proxy.total_requests() == 1


def test_no_credentials_is_a_clear_error(fault_proxy, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    ds = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{1000:07d}.bin"])
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(RuntimeError, match="no AWS credentials"):
        next(iter(loader))
    assert fault_proxy.total_requests() == 0


def test_torch_dataloader_reads_it_through_sync(fault_proxy):
    ds = s3(fault_proxy, f"s3://{BUCKET}/train/{{i:04d}}.bin", columns={"i": range(5)})
    with ds.sync() as sync_ds:
        got = list(DataLoader(sync_ds, batch_size=2))
    assert got == [[payload(100, salt=i) for i in range(j, min(j + 2, 5))] for j in range(0, 5, 2)]


def test_bad_locations_and_prefixes_are_refused(fault_proxy):
    ds = s3(fault_proxy, ["http://not-s3/x"])
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(ValueError, match="must start with s3://"):
        next(iter(loader))
    with pytest.raises(ValueError, match="prefix must be"):
        S3Dataset.from_prefix("bucket/train")
    with pytest.raises(FileNotFoundError, match="no objects under s3://tl-test/empty/"):
        S3Dataset.from_prefix(f"s3://{BUCKET}/empty/", endpoint_url=fault_proxy.url(""))


def test_expiring_credentials_are_refreshed_by_botocore_off_the_event_loop(fault_proxy):
    from datetime import UTC, datetime, timedelta

    from botocore.credentials import CredentialProvider, RefreshableCredentials

    refreshed_on: list[str] = []

    def metadata(minutes: int) -> dict[str, str]:
        expiry = (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()
        return {"access_key": "AKIAREFRESHED", "secret_key": "s", "token": "t", "expiry_time": expiry}

    def refresh() -> dict[str, str]:
        refreshed_on.append(threading.current_thread().name)
        return metadata(60)

    class Expiring(CredentialProvider):  # type: ignore[misc]
        METHOD = "test-expiring"

        def load(self) -> RefreshableCredentials:
            # 5 minutes left: inside botocore's refresh window, so the first GET refreshes.
            return RefreshableCredentials.create_from_metadata(metadata(5), refresh, self.METHOD)

    session = botocore.session.get_session()
    session.get_component("credential_provider").insert_before("env", Expiring())
    ds = s3(fault_proxy, [f"s3://{BUCKET}/train/{i:04d}.bin" for i in range(3)], botocore_session=session)
    assert load_all(ds) == [payload(100, salt=i) for i in range(3)]
    assert len(refreshed_on) == 1 and refreshed_on[0] != "threadloader-loop"
    assert "AKIAREFRESHED" in fault_proxy.headers_seen[-1]["Authorization"]


def test_moto_checking_signatures_accepts_ours_and_refuses_a_wrong_secret(fault_proxy, moto):
    iam = botocore.session.get_session().create_client("iam", endpoint_url=moto.endpoint)
    iam.create_user(UserName="reader")
    policy = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'
    iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=policy)
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    iam.close()

    def as_reader(secret: str) -> botocore.session.Session:
        session = botocore.session.get_session()
        session.set_credentials(key["AccessKeyId"], secret)
        return session

    locations = [f"s3://{BUCKET}/{k}" for k in ODD_KEYS] + [f"s3://{BUCKET}/sizes/{1000:07d}.bin"]
    moto.set_auth(True)
    try:
        good = s3(fault_proxy, locations, botocore_session=as_reader(key["SecretAccessKey"]), byte_range=(0, 5))
        assert load_all(good) == [k.encode()[:5] for k in ODD_KEYS] + [payload(1000)[:5]]
        wrong = s3(fault_proxy, locations[:1], botocore_session=as_reader("not-the-secret"))
        with ThreadLoader(wrong, batch_size=None) as loader, pytest.raises(HttpStatusError) as info:
            next(iter(loader))
    finally:
        moto.set_auth(False)
    assert info.value.status == 403 and "SignatureDoesNotMatch" in info.value.reason


def test_an_object_stored_gzipped_is_its_stored_bytes_as_botocore_returns_them(fault_proxy, moto):
    raw = gzip.compress(b"hello world " * 1000, mtime=0)
    client = botocore.session.get_session().create_client("s3", endpoint_url=moto.endpoint)
    try:
        client.put_object(Bucket=BUCKET, Key="gz/a.json.gz", Body=raw, ContentEncoding="gzip")
        stored = client.get_object(Bucket=BUCKET, Key="gz/a.json.gz")["Body"].read()
    finally:
        client.close()
    assert stored == raw
    location = [f"s3://{BUCKET}/gz/a.json.gz"]  # straight to moto: the proxy would drop Content-Encoding
    assert load_all(S3Dataset(location, endpoint_url=moto.endpoint, max_bytes=len(raw))) == [raw]
    assert load_all(S3Dataset(location, endpoint_url=moto.endpoint, byte_range=(0, 10))) == [raw[:10]]


def test_a_redirect_answer_is_an_error_with_s3s_code_not_data(fault_proxy):
    fault_proxy.fail(1, status=301, code="PermanentRedirect")
    ds = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{1000:07d}.bin"])
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(HttpStatusError) as info:
        next(iter(loader))
    assert info.value.status == 301 and "PermanentRedirect" in info.value.reason
    assert fault_proxy.total_requests() == 1


def test_aclose_leaves_no_task_and_no_connection(fault_proxy):
    async def main() -> list[asyncio.Task]:
        ds = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{1000:07d}.bin"])
        assert await ds[0] == payload(1000)
        await ds.aclose()
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(main()) == []


def test_it_pickles_for_spawned_workers_unless_given_a_botocore_session(fault_proxy):
    import pickle

    ds = s3(fault_proxy, [f"s3://{BUCKET}/sizes/{1000:07d}.bin"], max_bytes=1000)
    assert load_all(ds) == [payload(1000)]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.max_bytes == 1000 and load_all(copy) == [payload(1000)]
    with_session = s3(fault_proxy, [ds.locations[0]], botocore_session=botocore.session.Session())
    with pytest.raises(TypeError, match=r"botocore_session=.* cannot be pickled"):
        pickle.dumps(with_session)


def test_tls_is_verified_against_botocores_ca_bundle(moto, tmp_path, monkeypatch):
    import aiohttp

    from tests.fixtures.servers import self_signed_tls

    tls = S3FaultProxy(moto.endpoint, self_signed_tls(tmp_path)).start()
    try:
        location = [f"s3://{BUCKET}/sizes/{1000:07d}.bin"]
        with ThreadLoader(S3Dataset(location, endpoint_url=tls.url(""), retry=FAST), batch_size=None) as loader:
            with pytest.raises(aiohttp.ClientSSLError):  # a certificate no one vouches for: refused, once
                next(iter(loader))
        assert tls.total_requests() == 0
        monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "cert.pem"))
        assert load_all(S3Dataset(location, endpoint_url=tls.url(""), retry=FAST)) == [payload(1000)]
        assert tls.total_requests() == 1
    finally:
        tls.stop()
