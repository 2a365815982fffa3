"""FsspecDataset over ``s3://`` (s3fs) against moto's server, behind a proxy that records
every request (method and path) and can hold them: one GET per item, and as many in flight
as the loader asks, not s3fs's default pool of 10."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.loading import load_all
from tests.fixtures.servers import BUCKET, RecordingProxy, aws_env, moto, payload
from tests.fixtures.threads import wait_until
from torch_threadloader import ThreadLoader
from torch_threadloader.remote import FsspecDataset

__all__ = ["aws_env", "moto"]  # fixtures used here

KEYS = [f"s3://{BUCKET}/train/{i:04d}.bin" for i in range(5)]  # payload(100, salt=i), from the moto fixture


@pytest.fixture(scope="module")
def recording_proxy(moto) -> Iterator[RecordingProxy]:
    srv = RecordingProxy(moto.endpoint).start()
    yield srv
    srv.stop()


def dataset(recording_proxy: RecordingProxy, n: int, **kwargs: Any) -> FsspecDataset:
    options = {"endpoint_url": recording_proxy.url(""), **kwargs.pop("storage_options", {})}
    return FsspecDataset([KEYS[i % 5] for i in range(n)], storage_options=options, **kwargs)


def expected(n: int) -> list[bytes]:
    return [payload(100, salt=i % 5) for i in range(n)]


@pytest.mark.parametrize("cap", [None, 1000])  # 1000: a ranged GET of at most 1001 bytes
def test_one_get_per_item_and_nothing_else(recording_proxy, cap):
    recording_proxy.release()
    kwargs = {"max_bytes": cap} if cap is not None else {}
    with ThreadLoader(dataset(recording_proxy, 20, **kwargs), batch_size=None, num_workers=4) as loader:
        got = list(loader)
    assert got == expected(20)
    with recording_proxy.lock:
        calls = list(recording_proxy.calls)
    assert [m for m, _ in calls] == ["GET"] * 20, calls  # no HEAD before each GET
    assert sorted(p for _, p in calls) == sorted(f"/{k[5:]}" for k in [KEYS[i % 5] for i in range(20)])


def consume_in_background(loader: ThreadLoader) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.extend(b for batch in loader for b in batch)
        except BaseException as exc:  # handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, name="test-consumer")
    thread.start()
    return thread, out


@pytest.mark.parametrize("in_flight", [128, 256])
def test_as_many_requests_in_flight_as_the_loader_asks(recording_proxy, in_flight):
    """Every request is held at the proxy until ``in_flight`` of them are there at once
    (s3fs's default pool would stop at 10): then all are let through."""
    ds = dataset(recording_proxy, in_flight)
    with ThreadLoader(ds, batch_size=32, num_workers=in_flight // 32, item_concurrency=32) as loader:
        thread, out = consume_in_background(loader)
        reached = wait_until(lambda: recording_proxy.count("in_flight") >= in_flight, timeout=30)
        peak = recording_proxy.count("in_flight")
        recording_proxy.release()
        thread.join(60)
    assert reached, f"only {peak} requests were in flight, {in_flight} asked for"
    assert out == expected(in_flight)
    assert recording_proxy.count("max_in_flight") == in_flight


def test_a_pool_set_in_storage_options_caps_the_requests(recording_proxy):
    ds = dataset(recording_proxy, 64, storage_options={"config_kwargs": {"max_pool_connections": 4}})
    with ThreadLoader(ds, batch_size=32, num_workers=2, item_concurrency=32) as loader:
        thread, out = consume_in_background(loader)
        assert wait_until(lambda: recording_proxy.count("in_flight") >= 4, timeout=30)
        recording_proxy.release()
        thread.join(60)
    assert out == expected(64)
    assert recording_proxy.count("max_in_flight") == 4


def test_botocore_data_is_parsed_once_for_every_loop(recording_proxy, monkeypatch):
    """Each loader's loop makes its own s3fs client; the JSON botocore reads to make one (the
    S3 model, endpoints, rule sets) is parsed by the first only, and every client reads it
    through the one shared loader."""
    from botocore.loaders import JSONFileLoader

    from torch_threadloader.remote import fsspec_dataset

    recording_proxy.release()
    monkeypatch.setattr(fsspec_dataset, "_loaders", {})  # this test's process-wide loader starts empty
    parsed: list[str] = []
    original = JSONFileLoader.load_file

    def counting(self: Any, file_path: str) -> Any:
        parsed.append(file_path)
        return original(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counting)
    ds = dataset(recording_proxy, 4)
    assert load_all(ds) == expected(4)
    first = len(parsed)
    assert first > 0 and any("s3" in p for p in parsed), parsed
    for workers in (0, 2):  # two more loaders, two more loops and clients
        assert load_all(ds, num_workers=workers) == expected(4)
    assert len(parsed) == first, parsed[first:]
    assert list(fsspec_dataset._loaders) == [None]  # one data path, one loader


def test_a_session_of_the_callers_is_kept_and_a_profile_reaches_s3fs_session(tmp_path, monkeypatch):
    from aiobotocore.session import AioSession

    from torch_threadloader.remote.fsspec_dataset import SharedLoader, _with_shared_loader

    s3fs = pytest.importorskip("s3fs")
    config = tmp_path / "config"
    config.write_text("[profile someone]\nregion = eu-west-3\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    own = AioSession()
    kept = _with_shared_loader(s3fs.S3FileSystem(session=own, asynchronous=True, skip_instance_cache=True))
    assert kept.session is own and not isinstance(own.get_component("data_loader"), SharedLoader)
    made = _with_shared_loader(s3fs.S3FileSystem(profile="someone", asynchronous=True, skip_instance_cache=True))
    assert made.session.profile == "someone"
    assert isinstance(made.session.get_component("data_loader"), SharedLoader)
    assert made._session_is_owned, "s3fs still owns (and may remake) the session"


def test_the_shared_loader_loads_once_under_concurrent_callers():
    from torch_threadloader.remote.fsspec_dataset import SharedLoader

    loader = SharedLoader(None)
    start = threading.Barrier(8)
    models: list[Any] = []

    def load_model() -> None:
        start.wait()
        models.append(loader.load_service_model("s3", "service-2"))

    threads = [threading.Thread(target=load_model, name=f"test-loader-{i}") for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(models) == 8 and all(m is models[0] for m in models)
    assert models[0]["metadata"]["endpointPrefix"] == "s3"
