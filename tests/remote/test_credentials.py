"""No credential reaches an origin other than the one it was meant for (the item's), on
real aiohttp servers on 127.0.0.1: session auth, session and request headers, cookies
(set by the server or given to the session), query parameters and user info, through
``FsspecDataset`` over http (configured as fsspec documents it) and ``HttpDataset``. A hop
to the item's own origin keeps them."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from tests.fixtures.loading import one
from tests.fixtures.servers import RedirectServer, credentials_in, payload
from torch_threadloader.remote import FsspecDataset, HttpDataset, Retry

FAST = Retry(max_retries=1, initial_backoff=0.001, max_backoff=0.01, jitter=0)
BASIC = "Basic YWxpY2U6cHctc2VjcmV0"  # alice:pw-secret


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[RedirectServer, RedirectServer]]:
    """Two servers on two ports of 127.0.0.1: ``a`` (the item's) and ``b`` (another origin)."""
    a, b = RedirectServer().start(), RedirectServer().start()
    yield a, b
    a.stop()
    b.stop()


def seen(server: RedirectServer) -> list[dict[str, str]]:
    """The credential-bearing headers of each request ``server`` received, in order."""
    with server.lock:
        return [credentials_in(h) for h in server.headers_seen]


# What fsspec documents for credentials over http: the session's (client_kwargs) auth,
# headers and cookies, and request options (headers, params).
FSSPEC_CREDENTIALS = {
    "session auth": {"client_kwargs": {"auth": aiohttp.BasicAuth("alice", "pw-secret")}},
    "session headers": {"client_kwargs": {"headers": {"X-Session-Default": "sess-secret"}}},
    "session cookies": {"client_kwargs": {"cookies": {"sid": "jar-secret"}}},
    "request headers": {"headers": {"Authorization": "Bearer tok-secret", "X-Api-Key": "key-secret"}},
}


@pytest.mark.parametrize("options", FSSPEC_CREDENTIALS.values(), ids=FSSPEC_CREDENTIALS.keys())
def test_fsspec_credentials_go_to_the_items_origin_and_never_past_a_redirect(pair, options):
    a, b = pair
    ds = FsspecDataset([a.url(f"/data/redirect?to={b.url('/data/bytes/5')}")], storage_options=options, retry=FAST)
    assert one(ds) == payload(5)
    assert seen(a)[0], "the item's own origin gets its credentials"
    assert seen(b) == [{}], f"another origin got {seen(b)}"
    a.reset()  # a redirect on the item's origin keeps them
    assert one(FsspecDataset([a.url("/data/redirect?to=/data/bytes/6")], storage_options=options)) == payload(6)
    first, second = seen(a)
    assert first and second == first


def test_fsspec_query_params_are_sent_once_to_the_items_origin(pair):
    a, b = pair
    options = {"params": {"token": "q-secret"}}
    ds = FsspecDataset([a.url(f"/data/redirect?to={b.url('/data/bytes/5')}")], storage_options=options, retry=FAST)
    assert one(ds) == payload(5)
    assert "token=q-secret" in a.targets[0]
    assert b.targets == ["/data/bytes/5"]


def test_a_cookie_set_by_the_items_server_does_not_follow_a_redirect_to_another_port(pair):
    a, b = pair
    # localhost: aiohttp's cookie jar keeps no cookie of an IP address. Cookies do not tell
    # ports apart, so without the rule the jar would send a's cookie to b.
    a_host, b_host = (s.url("/").replace("127.0.0.1", "localhost").rstrip("/") for s in pair)
    ds = HttpDataset([f"{a_host}/data/setcookie?to={b_host}/data/bytes/5"], retry=FAST)
    assert one(ds) == payload(5)
    assert seen(b) == [{}]
    a.reset()
    same = HttpDataset([f"{a_host}/data/setcookie?to=/data/bytes/6"], retry=FAST)
    assert one(same) == payload(6)
    assert seen(a)[1] == {"Cookie": "sid=cookie-secret"}  # its own origin: the cookie goes on


def test_user_info_goes_to_the_items_origin_only(pair):
    a, b = pair
    url = a.url(f"/data/redirect?to={b.url('/data/bytes/5')}").replace("http://", "http://alice:pw-secret@")
    assert one(HttpDataset([url], retry=FAST)) == payload(5)
    assert seen(a)[0]["Authorization"] == BASIC
    assert seen(b) == [{}]
    a.reset()
    same = a.url("/data/redirect?to=/data/bytes/6").replace("http://", "http://alice:pw-secret@")
    assert one(HttpDataset([same], retry=FAST)) == payload(6)
    assert [h.get("Authorization") for h in seen(a)] == [BASIC] * 2


def test_http_dataset_headers_from_a_function_go_to_the_items_origin_only(pair):
    a, b = pair

    async def token(url: str) -> dict[str, str]:
        return {"Authorization": "Bearer fn-secret", "X-Trace": "not-a-secret"}

    ds = HttpDataset([a.url(f"/data/redirect?to={b.url('/data/bytes/5')}")], headers=token, byte_range=(0, 2))
    assert one(ds) == payload(5)[:2]
    with b.lock:
        (only,) = b.headers_seen
    assert only["Range"] == "bytes=0-1" and "X-Trace" not in only and "Authorization" not in only
