"""Redaction fails closed: user info yarl cannot parse is never shown, every query key that
looks like a credential is redacted, and so is the whole query of a presigned URL; checked
on ``redact_url`` and through the errors of datasets on a real aiohttp server (their
message, traceback and ``loader.errors()``)."""

from __future__ import annotations

import traceback

import pytest

from torch_threadloader import ThreadLoader
from torch_threadloader.remote import FsspecDataset, HttpDataset, LocationError, NotFoundError, Retry, redact_url

FAST = Retry(max_retries=1, initial_backoff=0.001, max_backoff=0.01, jitter=0)
SECRETS = ("hunter2", "alice", "K-api", "K-client", "K-private", "K-token", "K-sig", "K-date", "K-cred")


def assert_no_secret(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{leaked} in {text!r}"


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:hunter2@h:99999/x",  # a port out of range: yarl raises
        "http://alice:hunter2@h:99999/x?token=K-token",
        "http://alice:hunter2@[::1/x",  # an unclosed IPv6 host
        "http://alice:hunter2/x@h:port/x",  # '/' in the password
        "http://alice:hunter2?@h:99999/x",
        "http://alice@hunter2@h/x",
        "https://h/x?api-key=K-api&client_secret=K-client&private_token=K-private&token=K-token",
        "https://h/x?Signature=K-sig&X-Amz-Date=K-date",
        "ftp://alice:hunter2@h/x",
    ],
)
def test_redact_url_never_returns_a_credential(url):
    assert_no_secret(redact_url(url))


def test_credential_looking_keys_are_redacted_and_the_others_kept():
    shown = redact_url(
        "https://h.example/x?api-key=K-api&client_secret=K-client&private_token=K-private&part=1&X-Amz-Date=K-date"
    )
    assert_no_secret(shown)
    assert "part=1" in shown and "h.example/x" in shown and shown.count("REDACTED") == 4


def test_the_whole_query_of_a_presigned_url_is_redacted():
    sigv4 = (
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=K-cred"
        "&X-Amz-Date=K-date&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=K-sig&response-type=x"
    )
    assert redact_url(sigv4) == "https://b.s3.amazonaws.com/k?REDACTED"
    assert redact_url("https://a.blob.core.windows.net/c/k?sv=2020&se=x&sp=r&sig=K-sig").endswith("/c/k?REDACTED")
    assert redact_url("https://b.s3.amazonaws.com/k?AWSAccessKeyId=A&Expires=1&Signature=K-sig").endswith("?REDACTED")


def test_unparseable_user_info_is_redacted_in_the_error_and_in_loader_errors(server):
    """Finding 6: ``http://user:pass@h:99999/x`` came back from the redactor unchanged, and
    the password showed in the error and in ``loader.errors()``."""
    bad = "http://alice:hunter2@127.0.0.1:99999/data/bytes/3?token=K-token"
    for kind in (HttpDataset, FsspecDataset):
        ds = kind([bad], retry=FAST)
        with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(Exception) as info:
            next(iter(loader))
        assert isinstance(info.value, (LocationError, ValueError)), repr(info.value)
        assert_no_secret("".join(traceback.format_exception(info.value)) + repr(info.value))
        ds = kind([server.url("/data/bytes/3"), bad], retry=FAST)
        with ThreadLoader(ds, batch_size=2, on_error="skip") as loader:
            list(loader)
            (record,) = loader.errors()
        assert record["index"] == 1
        assert_no_secret(repr(record))


def test_credential_query_keys_are_redacted_in_a_servers_error_and_in_loader_errors(server):
    query = "api-key=K-api&client_secret=K-client&private_token=K-private&part=1"
    ds = HttpDataset([server.url(f"/data/status/404?{query}")], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(NotFoundError) as info:
        next(iter(loader))
    text = "".join(traceback.format_exception(info.value))
    assert_no_secret(text)
    assert "part=1" in str(info.value) and "/data/status/404" in info.value.location
    presigned = server.url(
        "/data/status/403?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=K-cred&X-Amz-Signature=K-sig"
    )
    ds = HttpDataset([server.url("/data/bytes/2"), presigned], retry=FAST)
    with ThreadLoader(ds, batch_size=2, on_error="skip") as loader:
        list(loader)
        (record,) = loader.errors()
    assert_no_secret(repr(record))
    assert "/data/status/403?REDACTED" in record["message"], record
