"""``GetSigner`` signs exactly as botocore's plain ``S3SigV4Auth`` does, whatever the secret,
token, day, region, endpoint and key, with its derived keys kept across them; and the key is
derived once per secret, day and region."""

from __future__ import annotations

import datetime
from typing import Any
from unittest import mock
from urllib.parse import quote

import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_threadloader.remote import signing
from torch_threadloader.remote.signing import UNSIGNED_PAYLOAD_CONFIG, GetSigner, host_of

#: One signer for every example: what it keeps from one must never change another's signature.
SHARED = {region: GetSigner(region) for region in ("us-east-1", "eu-west-3", "ap-southeast-2")}

BASES = [
    "https://bucket.s3.amazonaws.com/",
    "https://s3.eu-west-3.amazonaws.com/bucket/",
    "http://127.0.0.1:9000/bucket/",
    "http://LOCALHOST:80/b/",
    "https://[::1]:8443/b/",
    "https://Bucket.S3.Example.com:443/",
]


def botocore_headers(url: str, region: str, credentials: Any, headers: dict[str, str]) -> dict[str, str]:
    """What botocore's own signer makes, with nothing kept."""
    request = AWSRequest(method="GET", url=url, headers=headers)
    request.context["client_config"] = UNSIGNED_PAYLOAD_CONFIG
    S3SigV4Auth(credentials, "s3", region).add_auth(request)
    return dict(request.headers.items())


def at(when: datetime.datetime) -> Any:
    return mock.patch.object(botocore.auth, "get_current_datetime", return_value=when)


@settings(max_examples=300, deadline=None)
@given(
    secret=st.sampled_from(["s1", "bench-secret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]) | st.text(min_size=1),
    access=st.sampled_from(["AKIAONE", "AKIATWO"]),
    token=st.none() | st.sampled_from(["tok", "FwoGZXIvYXdzEJr//////////"]),
    day=st.integers(0, 3),
    second=st.integers(0, 86_399),
    region=st.sampled_from(sorted(SHARED)),
    base=st.sampled_from(BASES),
    key=st.text(min_size=1, max_size=30),
    byte_range=st.none() | st.tuples(st.integers(0, 100), st.integers(1, 100)),
)
def test_signs_as_botocore_does(secret, access, token, day, second, region, base, key, byte_range):
    when = datetime.datetime(2026, 12, 30) + datetime.timedelta(days=day, seconds=second)
    credentials = Credentials(access, secret, token).get_frozen_credentials()
    url = base + quote(key, safe="/~")
    extra = {} if byte_range is None else {"Range": f"bytes={byte_range[0]}-{sum(byte_range)}"}
    with at(when):
        expected = botocore_headers(url, region, credentials, dict(extra))
        ours = SHARED[region].headers(url, host_of(base), dict(extra), credentials)
    assert ours.pop("host") == botocore.auth._host_from_url(url)
    assert ours == expected
    assert expected["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={access}/{when:%Y%m%d}/{region}/s3/")


def test_the_signing_key_is_derived_once_per_secret_day_and_region():
    signer = GetSigner("us-east-1")
    credentials = Credentials("AKIA", "secret").get_frozen_credentials()
    url, host = "https://bucket.s3.amazonaws.com/a.bin", "bucket.s3.amazonaws.com"
    derived = mock.patch.object(S3SigV4Auth, "_sign", autospec=True, side_effect=S3SigV4Auth._sign)
    with derived as sign, at(datetime.datetime(2026, 12, 6, 10)):
        for _ in range(5):
            signer.headers(url, host, {}, credentials)
        steps = [c for c in sign.call_args_list if not c.kwargs.get("hex")]
        assert len(steps) == 4  # the date, region, service and "aws4_request" steps, once
        assert sign.call_count == 4 + 5  # and one signature per request
    with derived as sign, at(datetime.datetime(2026, 12, 7, 0, 0, 1)):  # the next day: derived again
        signer.headers(url, host, {}, credentials)
        assert sign.call_count == 5
    other = Credentials("AKIA", "rotated").get_frozen_credentials()
    with derived as sign, at(datetime.datetime(2026, 12, 7, 0, 0, 2)):  # a rotated secret: derived again
        signer.headers(url, host, {}, other)
        assert sign.call_count == 5


def test_what_is_kept_is_bounded():
    signer = GetSigner("us-east-1")
    url, host = "https://bucket.s3.amazonaws.com/a.bin", "bucket.s3.amazonaws.com"
    for n in range(3 * signing.MAX_KEPT_STEPS):
        signer.headers(url, host, {}, Credentials("AKIA", f"secret-{n}").get_frozen_credentials())
        assert len(signer._keys._steps) <= signing.MAX_KEPT_STEPS


@pytest.mark.parametrize(
    ("base", "host"),
    [
        ("https://bucket.s3.amazonaws.com/", "bucket.s3.amazonaws.com"),
        ("https://b.example.com:443/x/", "b.example.com"),
        ("http://127.0.0.1:80/b/", "127.0.0.1"),
        ("http://127.0.0.1:9000/b/", "127.0.0.1:9000"),
        ("http://MiXeD.example.com/", "mixed.example.com"),
        ("https://[::1]:8443/b/", "[::1]:8443"),
    ],
)
def test_host_of_a_base(base, host):
    assert host_of(base) == host
