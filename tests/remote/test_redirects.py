"""The redirect matrix, on real aiohttp servers on 127.0.0.1 (other ports, ``localhost`` as
another host, ``127.0.0.10`` as a host whose URL starts with ``http://127.0.0.1``, a TLS
server): for each redirect, followed or refused as docs/remote.md says, and the
credential-bearing headers each server saw. ``HttpDataset`` without a base (a list) and
with one (a template), and ``FsspecDataset`` over http."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.servers import RedirectServer, credentials_in, payload, self_signed_tls
from torch_threadloader import ThreadLoader
from torch_threadloader.remote import FsspecDataset, HttpDataset, HttpStatusError, LocationError, Retry

FAST = Retry(max_retries=1, initial_backoff=0.001, max_backoff=0.01, jitter=0)
HEADERS = {"Authorization": "Bearer tok-secret", "X-Api-Key": "key-secret"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``a`` (the item's server), ``b`` (another port), ``e`` (127.0.0.10), ``tls`` (https,
    self-signed) and ``client_ssl`` (a context that trusts it)."""
    directory = tmp_path_factory.mktemp("tls")
    started = {
        "a": RedirectServer().start(),
        "b": RedirectServer().start(),
        "e": RedirectServer(host="127.0.0.10").start(),
        "tls": RedirectServer(self_signed_tls(directory)).start(),
    }
    try:
        yield {**started, "client_ssl": ssl.create_default_context(cafile=f"{directory}/cert.pem")}
    finally:
        for server in started.values():
            server.stop()


def first_item_or_error(ds: Any) -> Any:
    """Item 0 through ThreadLoader: its bytes, or the exception it raised."""
    with ThreadLoader(ds, batch_size=None) as loader:
        try:
            return next(iter(loader))
        except Exception as exc:  # the outcome is what the test compares
            return exc


def credentials_seen(server: RedirectServer) -> list[bool]:
    """For each request the server received, in order: whether it carried a credential."""
    with server.lock:
        return [bool(credentials_in(h)) for h in server.headers_seen]


# name, the first request's path on ``a`` ({a}, {b}, {e}, {a_host} filled in), then for
# "no base" and "base": the outcome (bytes or (error, pattern)) and, per server, the
# credentials seen by each of its requests.
MATRIX = [
    (
        "same origin",
        "/data/redirect?to=/data/bytes/5",
        (payload(5), {"a": [True, True]}),
        (payload(5), {"a": [True, True]}),
    ),
    (
        "other port",
        "/data/redirect?to={b}/data/bytes/5",
        (payload(5), {"a": [True], "b": [False]}),
        ((LocationError, r"a redirect to .* leaves the base .*another origin"), {"a": [True], "b": []}),
    ),
    (
        "other host (localhost)",
        "/data/redirect?to={a_host}/data/bytes/5",
        (payload(5), {"a": [True, False]}),
        ((LocationError, r"a redirect to http://localhost.* leaves the base"), {"a": [True]}),
    ),
    (
        "a host that extends the base's (127.0.0.10)",
        "/data/redirect?to={e}/data/bytes/5",
        (payload(5), {"a": [True], "e": [False]}),
        ((LocationError, r"a redirect to http://127\.0\.0\.10.* leaves the base"), {"a": [True], "e": []}),
    ),
    (
        "a loop",
        "/data/loop/a",
        ((HttpStatusError, r"HTTP 302 a redirect loop back to .*/data/loop/a"), {"a": [True, True]}),
        ((HttpStatusError, r"HTTP 302 a redirect loop back to .*/data/loop/a"), {"a": [True, True]}),
    ),
    (
        "10 hops",
        "/data/hops/10",
        (payload(7), {"a": [True] * 11}),
        (payload(7), {"a": [True] * 11}),
    ),
    (
        "11 hops",
        "/data/hops/11",
        ((HttpStatusError, r"more than 10 redirects"), {"a": [True] * 11}),
        ((HttpStatusError, r"more than 10 redirects"), {"a": [True] * 11}),
    ),
    (
        "a path outside the base",
        "/data/redirect?to=/secret",
        ((HttpStatusError, r"HTTP 418"), {"a": [True, True]}),
        ((LocationError, r"a redirect to .*/secret leaves the base .*a path outside"), {"a": [True]}),
    ),
    (
        "an encoded traversal under the base",
        "/data/redirect?to=/data/x%253F%252F..%252F..%252Fsecret",
        ((HttpStatusError, r"HTTP 418"), {"a": [True, True]}),
        ((LocationError, r"leaves the base .*an encoded '\?'"), {"a": [True]}),
    ),
]


def _fill(path: str, servers: dict[str, Any]) -> str:
    a = servers["a"]
    return path.format(
        b=servers["b"].url("").rstrip("/"),
        e=servers["e"].url("").rstrip("/"),
        a_host=a.url("").replace("127.0.0.1", "localhost").rstrip("/"),
    )


def _check(got: Any, expected: Any) -> None:
    if isinstance(expected, bytes):
        assert got == expected, got
    else:
        error, pattern = expected
        assert isinstance(got, error), repr(got)
        assert re.search(pattern, str(got)), str(got)


@pytest.mark.parametrize("kind", ["HttpDataset", "FsspecDataset"])
@pytest.mark.parametrize("with_base", [False, True], ids=["no base", "base"])
@pytest.mark.parametrize(("name", "path", "no_base", "base"), MATRIX, ids=[m[0] for m in MATRIX])
def test_redirect_matrix(servers, kind, with_base, name, path, no_base, base):
    a = servers["a"]
    first = _fill(path, servers)
    if with_base:
        locations: Any = a.url("/data/{p}")
        columns: Any = {"p": [first.removeprefix("/data/")]}
    else:
        locations, columns = [a.url(first)], None
    if kind == "HttpDataset":
        ds: Any = HttpDataset(locations, columns=columns, headers=HEADERS, retry=FAST)
    else:
        ds = FsspecDataset(locations, columns=columns, storage_options={"headers": HEADERS}, retry=FAST)
    expected, seen = base if with_base else no_base
    _check(first_item_or_error(ds), expected)
    for server_name in ("a", "b", "e", "tls"):
        assert credentials_seen(servers[server_name]) == seen.get(server_name, []), server_name


@pytest.mark.parametrize("with_base", [False, True], ids=["no base", "base"])
def test_https_to_http_is_refused_and_http_to_https_goes_without_credentials(servers, with_base):
    a, tls = servers["a"], servers["tls"]
    options = {"headers": HEADERS, "ssl": servers["client_ssl"]}
    down = f"redirect?to={a.url('/data/bytes/5')}"
    if with_base:
        ds = FsspecDataset(tls.url("/data/{p}"), columns={"p": [down]}, storage_options=options, retry=FAST)
    else:
        ds = FsspecDataset([tls.url(f"/data/{down}")], storage_options=options, retry=FAST)
    got = first_item_or_error(ds)
    assert isinstance(got, LocationError), repr(got)
    assert re.search(r"a redirect from https to http://127\.0\.0\.1.*not followed", str(got)), str(got)
    assert credentials_seen(tls) == [True] and credentials_seen(a) == []
    tls.reset()
    up = FsspecDataset([a.url(f"/data/redirect?to={tls.url('/data/bytes/6')}")], storage_options=options, retry=FAST)
    if with_base:  # another scheme and port: another origin, outside the base
        up = FsspecDataset(
            a.url("/data/{p}"), columns={"p": [f"redirect?to={tls.url('/data/bytes/6')}"]}, storage_options=options
        )
        got = first_item_or_error(up)
        assert isinstance(got, LocationError) and "leaves the base" in str(got), repr(got)
        assert credentials_seen(tls) == []
    else:
        assert first_item_or_error(up) == payload(6)
        assert credentials_seen(tls) == [False]


def test_a_redirect_to_a_scheme_that_is_not_http_is_refused(servers):
    a = servers["a"]
    got = first_item_or_error(HttpDataset([a.url("/data/redirect?to=file:///etc/passwd")], headers=HEADERS, retry=FAST))
    assert isinstance(got, LocationError) and "not an http(s) URL" in str(got), repr(got)


def test_a_location_with_user_info_is_followed_without_it(servers):
    a = servers["a"]
    target = a.url("/data/bytes/3").replace("http://", "http://mallory:planted@")
    assert first_item_or_error(HttpDataset([a.url(f"/data/redirect?to={target}")])) == payload(3)
    with a.lock:
        assert "Authorization" not in a.headers_seen[1]


def test_max_redirects_from_the_request_options_replaces_the_default(servers):
    a = servers["a"]
    ds = FsspecDataset([a.url("/data/hops/3")], storage_options={"max_redirects": 2}, retry=FAST)
    got = first_item_or_error(ds)
    assert isinstance(got, HttpStatusError) and "more than 2 redirects" in str(got), repr(got)
    assert first_item_or_error(FsspecDataset([a.url("/data/hops/2")], storage_options={"max_redirects": 2})) == payload(
        7
    )


@pytest.mark.parametrize("kind", [HttpDataset, FsspecDataset])
def test_a_port_column_confines_redirects_to_the_items_own_origin(servers, kind):
    """Finding 1: the base of ``http://127.0.0.1:{port}/...`` was compared as the string
    prefix ``http://127.0.0.1``, so a redirect to ``http://127.0.0.10:...`` was followed."""
    a, b, e = servers["a"], servers["b"], servers["e"]
    p = ["bytes/3", f"redirect?to={e.url('/data/bytes/5')}", f"redirect?to={b.url('/data/bytes/5')}"]
    ds = kind("http://127.0.0.1:{port}/data/{p}", columns={"port": [a.port] * 3, "p": p}, retry=FAST)
    assert first_item_or_error(ds) == payload(3)
    with ThreadLoader(ds, batch_size=None) as loader:
        it = iter(loader)
        next(it)
        for _ in (1, 2):
            with pytest.raises(LocationError, match=r"a redirect to .* leaves the base 'http://127.0.0.1:'"):
                next(it)
    assert e.total_requests() == 0 and b.total_requests() == 0


@pytest.mark.parametrize("kind", [HttpDataset, FsspecDataset])
def test_a_host_column_template_fetches_and_confines_redirects_to_each_items_origin(servers, kind):
    """Finding 5: ``http://{host}/...`` (the documented host-as-a-column template) raised
    yarl's ValueError when the dataset was made."""
    a, b = servers["a"], servers["b"]
    hosts = [f"127.0.0.1:{a.port}", f"localhost:{b.port}", f"127.0.0.1:{a.port}"]
    p = ["bytes/3", "redirect?to=/data/bytes/4", f"redirect?to={b.url('/data/bytes/5')}"]
    ds = kind("http://{host}/data/{p}", columns={"host": hosts, "p": p}, retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader:
        it = iter(loader)
        assert next(it) == payload(3)
        assert next(it) == payload(4)  # on its own origin (b, through localhost)
        with pytest.raises(LocationError, match=r"a redirect to .* leaves the base 'http://' \(another origin"):
            next(it)
    assert b.requests["/data/bytes/5"] == 0
