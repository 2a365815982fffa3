"""HttpDataset on a real aiohttp server on 127.0.0.1: bytes, locations, retries, caps, typed
errors, concurrency, cancellation, and the three users (ThreadLoader, torch's DataLoader
through ``sync()``, a datapipes graph). Every test ends with no connection left open."""

from __future__ import annotations

import asyncio
import gc
import os
import pickle
import signal
import socket
import threading
import time
import warnings

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import datapipes as dp
from tests.fixtures.loading import load_all, one
from tests.fixtures.servers import HttpServer, gzip_payload, payload, socket_buffer_bytes
from tests.fixtures.threads import wait_until
from torch_threadloader import ThreadLoader, concurrency
from torch_threadloader.remote import (
    DeadlineExceededError,
    FsspecDataset,
    HttpDataset,
    HttpStatusError,
    LocationError,
    NotFoundError,
    RetriesExhaustedError,
    Retry,
    TooLargeError,
)
from torch_threadloader.remote.http import CHUNK_BYTES

FAST = Retry(max_retries=2, initial_backoff=0.001, max_backoff=0.01, jitter=0)


# -- bytes and locations ---------------------------------------------------------------------


def test_items_are_the_exact_bytes_from_0_to_1_mb(server):
    sizes = [0, 1, 255, 4096, 65_537, 1 << 20]
    ds = HttpDataset([server.url(f"/data/bytes/{n}") for n in sizes])
    assert load_all(ds, num_workers=2, item_concurrency=1) == [payload(n) for n in sizes]


def test_a_streamed_body_without_length_is_read_whole(server):
    ds = HttpDataset([server.url("/data/bytes/100000?chunked=1")], max_bytes=100_000)
    assert one(ds) == payload(100_000)


def test_function_and_template_locations_fetch_the_same_items(server):
    sizes = [3, 30, 300]
    by_fn = HttpDataset(lambda i: server.url(f"/data/bytes/{sizes[i]}"), length=3)
    by_template = HttpDataset(server.url("/data/bytes/{n}"), columns={"n": sizes})
    assert load_all(by_fn) == load_all(by_template) == [payload(n) for n in sizes]
    assert server.total_requests() == 6


@pytest.mark.parametrize("value", ["../../secret", "%2e%2e/%2e%2e/secret", "%252e%252e/secret", "/secret"])
def test_a_location_leaving_its_base_is_refused_and_never_requested(server, value):
    ds = HttpDataset(server.url("/data/{name}"), columns={"name": ["bytes/3", value]})
    with ThreadLoader(ds, batch_size=2) as loader, pytest.raises(LocationError, match="item 1"):
        next(iter(loader))
    assert server.count("outside_hits") == 0


def test_a_redirect_under_the_base_is_followed_one_leaving_it_is_not(server):
    ds = HttpDataset(server.url("/data/{p}"), columns={"p": ["redirect?to=/data/bytes/5", "redirect?to=/secret"]})
    with ThreadLoader(ds, batch_size=None) as loader:
        it = iter(loader)
        assert next(it) == payload(5)
        with pytest.raises(LocationError, match=r"a redirect to .*/secret leaves the base"):
            next(it)
    assert server.count("outside_hits") == 0
    unguarded = HttpDataset([server.url("/data/redirect?to=/data/bytes/6")])  # no base: followed
    assert one(unguarded) == payload(6)


def test_headers_are_not_sent_to_another_origin_on_a_redirect(server):
    other = server.url("/data/bytes/1").replace("127.0.0.1", "localhost")  # same server, another origin
    same = server.url("/data/bytes/2")
    headers = {"X-Api-Key": "k-secret", "Authorization": "Bearer b-secret"}
    for target, body, kept in ((other, payload(1), False), (same, payload(2), True)):
        server.reset()
        assert one(HttpDataset([server.url(f"/data/redirect?to={target}")], headers=headers)) == body
        first, second = server.headers_seen
        assert first["X-Api-Key"] == "k-secret" and first["Authorization"] == "Bearer b-secret"
        assert ("X-Api-Key" in second, "Authorization" in second) == (kept, kept)
    server.reset()  # a byte range is not a secret: it goes on
    ranged = HttpDataset([server.url(f"/data/redirect?to={other}")], headers=headers, byte_range=(0, 1))
    assert one(ranged) == payload(1)
    assert server.headers_seen[1]["Range"] == "bytes=0-0" and "X-Api-Key" not in server.headers_seen[1]


def test_headers_from_a_mapping_and_from_a_function_called_per_attempt(server):
    ds = HttpDataset([server.url("/data/bytes/5")], headers={"Authorization": "Bearer fixed"})
    one(ds)
    assert server.headers_seen[-1]["Authorization"] == "Bearer fixed"
    server.reset()
    tokens = iter(range(100))

    async def fresh_token(url: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {next(tokens)}"}

    ds = HttpDataset([server.url("/data/flaky/hdr/2/503")], headers=fresh_token, retry=FAST)
    one(ds)
    assert [h["Authorization"] for h in server.headers_seen] == ["Bearer 0", "Bearer 1", "Bearer 2"]


def test_a_byte_range_is_read_even_from_a_server_that_ignores_it(server):
    ds = HttpDataset([server.url("/data/bytes/1000")], byte_range=(10, 20))
    assert one(ds) == payload(1000)[10:20]


# -- retries -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried_until_success(server, status):
    ds = HttpDataset([server.url(f"/data/flaky/s{status}/2/{status}")], retry=FAST)
    assert one(ds) == payload(64)
    assert server.total_requests() == 3


def test_the_default_retry_needs_no_configuration(server):
    ds = HttpDataset([server.url("/data/flaky/default/2/503")])
    assert one(ds) == payload(64)


def test_retry_after_in_seconds_replaces_a_long_backoff(server):
    # Without Retry-After the 60 s backoff would pass the 30 s deadline: DeadlineExceededError at once.
    slow = Retry(max_retries=3, initial_backoff=60, max_backoff=60, jitter=0)
    ds = HttpDataset([server.url("/data/flaky/ra/1/429?retry_after=0")], retry=slow, deadline=30)
    assert one(ds) == payload(64)
    ds = HttpDataset([server.url("/data/flaky/nora/1/429")], retry=slow, deadline=30)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(DeadlineExceededError):
        next(iter(loader))


def test_retry_after_as_an_http_date_and_capped_by_max_backoff(server):
    slow = Retry(max_retries=3, initial_backoff=60, max_backoff=60, jitter=0)
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    ds = HttpDataset([server.url(f"/data/flaky/date/1/503?retry_after={past}")], retry=slow, deadline=30)
    assert one(ds) == payload(64)
    capped = Retry(max_retries=3, initial_backoff=0.01, max_backoff=0.01, jitter=0)
    ds = HttpDataset([server.url("/data/flaky/cap/1/503?retry_after=3600")], retry=capped, deadline=30)
    assert one(ds) == payload(64)


def test_a_retry_after_that_is_not_an_ascii_number_falls_back_to_the_backoff(server):
    ds = HttpDataset([server.url("/data/flaky/sup/1/503?retry_after=%C2%B2")], retry=FAST)
    assert one(ds) == payload(64)
    assert server.total_requests() == 2


def test_a_pinned_certificate_that_does_not_match_is_raised_at_once_not_retried(tmp_path):
    import aiohttp

    from tests.fixtures.servers import self_signed_tls
    from torch_threadloader.remote.http import get_body
    from torch_threadloader.remote.retry import with_retries

    tls = HttpServer(self_signed_tls(tmp_path)).start()
    attempts = 0

    async def main() -> None:
        nonlocal attempts
        pinned = aiohttp.TCPConnector(ssl=aiohttp.Fingerprint(b"\0" * 32))
        async with aiohttp.ClientSession(connector=pinned) as session:

            async def attempt(limit: float | None) -> bytes:
                nonlocal attempts
                attempts += 1
                return await get_body(
                    session, tls.url("/data/bytes/3"), None, shown="x", max_bytes=None, byte_range=None
                )

            await with_retries(attempt, retry=FAST, timeout=5, deadline=None, location="x")

    try:
        with pytest.raises(aiohttp.ServerFingerprintMismatch):
            asyncio.run(main())
    finally:
        tls.stop()
    assert attempts == 1


def test_a_body_cut_short_is_retried(server):
    ds = HttpDataset([server.url("/data/cut/c/1/20000")], retry=FAST)
    assert one(ds) == payload(20000)
    assert server.total_requests() == 2


def test_retries_exhausted_say_how_many_attempts_and_the_last_cause(server):
    ds = HttpDataset([server.url("/data/flaky/always/100/500")], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(RetriesExhaustedError) as info:
        next(iter(loader))
    assert info.value.attempts == 3
    assert "HTTP 500" in str(info.value.last_error)
    assert "3 attempts" in str(info.value)
    assert server.total_requests() == 3


def test_a_refused_connection_is_an_error_not_a_hang():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    ds = HttpDataset([f"http://127.0.0.1:{port}/data/x"], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(RetriesExhaustedError) as info:
        next(iter(loader))
    assert info.value.attempts == 3
    assert "ClientConnectorError" in str(info.value.last_error)


def test_a_tls_failure_is_raised_at_once_not_retried(server):
    import aiohttp

    ds = HttpDataset([server.url("/data/bytes/3").replace("http://", "https://")], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(aiohttp.ClientSSLError):
        next(iter(loader))


# -- typed errors ------------------------------------------------------------------------------


def test_a_404_is_raised_once_with_the_status_and_the_redacted_url(server):
    url = server.url("/data/status/404").replace("http://", "http://alice:hunter2@") + "?token=s3cret"
    ds = HttpDataset([url], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(NotFoundError) as info:
        next(iter(loader))
    err = info.value
    assert isinstance(err, FileNotFoundError) and err.status == 404
    assert "hunter2" not in str(err) and "s3cret" not in str(err) and "/data/status/404" in err.location
    assert server.total_requests() == 1


def test_no_error_text_or_traceback_shows_a_credential(server):
    import traceback

    secret = "http://alice:hunter2@"
    cases = [
        ("/data/status/500", RetriesExhaustedError),  # its cause chain included
        ("/data/status/403", HttpStatusError),
        ("/data/redirect?to=/secret", LocationError),  # a base with credentials
    ]
    for path, error in cases:
        url = server.url(path).replace("http://", secret) + ("&" if "?" in path else "?") + "token=s3cret"
        ds = HttpDataset(server.url("/data/{p}").replace("http://", secret), columns={"p": [url.split("/data/")[1]]})
        with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(error) as info:
            next(iter(loader))
        text = "".join(traceback.format_exception(info.value)) + repr(ds) + repr(info.value)
        assert "hunter2" not in text and "s3cret" not in text, text


@pytest.mark.parametrize("status", [400, 401, 403, 410])
def test_other_client_errors_are_not_retried(server, status):
    ds = HttpDataset([server.url(f"/data/status/{status}")], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(HttpStatusError) as info:
        next(iter(loader))
    assert info.value.status == status and not isinstance(info.value, NotFoundError)
    assert server.total_requests() == 1


def test_an_error_fails_only_its_own_batch(server):
    urls = [server.url(p) for p in ["/data/bytes/1", "/data/bytes/2", "/data/status/404", "/data/bytes/4"]]
    with ThreadLoader(HttpDataset(urls), batch_size=2, num_workers=2, item_concurrency=2) as loader:
        it = iter(loader)
        assert next(it) == [payload(1), payload(2)]
        with pytest.raises(NotFoundError):
            next(it)
        with pytest.raises(StopIteration):
            next(it)


# -- size caps ---------------------------------------------------------------------------------


def test_an_item_of_exactly_max_bytes_is_accepted_one_more_byte_is_refused(server):
    ok = HttpDataset([server.url("/data/bytes/1000"), server.url("/data/bytes/1000?chunked=1")], max_bytes=1000)
    assert load_all(ok) == [payload(1000)] * 2
    over = HttpDataset([server.url("/data/bytes/1001")], max_bytes=1000)
    with ThreadLoader(over, batch_size=None) as loader, pytest.raises(TooLargeError) as info:
        next(iter(loader))
    assert info.value.size == 1001 and info.value.max_bytes == 1000


def test_a_declared_size_over_the_cap_is_refused_before_reading(server):
    # The server writes as fast as the client takes bytes (no clock): what it gets out beyond
    # what the client read is bounded by the kernel's socket buffers, far below 100 MB.
    ds = HttpDataset([server.url("/data/huge/100000000")], max_bytes=1000, retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(TooLargeError) as info:
        next(iter(loader))
    assert info.value.size == 100_000_000
    assert server.total_requests() == 1
    assert wait_until(lambda: server.count("disconnects") == 1)
    assert server.count("endless_bytes") < socket_buffer_bytes() + (1 << 20)  # the body was not read


def test_an_endless_body_is_abandoned_after_the_cap_plus_one_chunk(server):
    cap = 10_000
    ds = HttpDataset([server.url("/data/endless")], max_bytes=cap, retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(TooLargeError) as info:
        next(iter(loader))
    assert info.value.size is None
    assert wait_until(lambda: server.count("disconnects") == 1)
    sent = server.count("endless_bytes")
    assert sent < cap + CHUNK_BYTES + socket_buffer_bytes() + (1 << 20)  # read, plus what buffers hold
    assert wait_until(lambda: server.count("endless_bytes") == sent)  # and it stopped sending


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.sampled_from([0, 1, 999, 1000, 1001, CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 1, 150_000])
    | st.integers(0, 3000),
    cap=st.sampled_from([0, 1000, CHUNK_BYTES, 150_000]) | st.integers(0, 3000),
    how=st.sampled_from(["declared", "chunked", "gzip"]),
    reader=st.sampled_from([HttpDataset, FsspecDataset]),
)
@example(n=0, cap=0, how="gzip", reader=FsspecDataset)  # decoded, 0 bytes; as sent, 20
@example(n=150_000, cap=CHUNK_BYTES, how="gzip", reader=FsspecDataset)
@example(n=1001, cap=1000, how="declared", reader=HttpDataset)
def test_max_bytes_holds_for_every_size_length_and_encoding(server, n, cap, how, reader):
    """An item is the body the client sees (as sent by HttpDataset; decoded by fsspec's session)
    when it is at most ``max_bytes``, else ``TooLargeError``: with a ``Content-Length`` (read in
    one piece), without one (counted as it streams), and encoded."""
    path = {"declared": f"/data/bytes/{n}", "chunked": f"/data/bytes/{n}?chunked=1", "gzip": f"/data/gzip/{n}"}[how]
    seen = payload(n) if how != "gzip" or reader is FsspecDataset else gzip_payload(n)
    ds = reader([server.url(path)], max_bytes=cap, retry=FAST)

    async def get() -> bytes:
        try:
            return await ds[0]
        finally:
            await ds.aclose()

    if len(seen) <= cap:
        assert asyncio.run(get()) == seen
    else:
        with pytest.raises(TooLargeError):
            asyncio.run(get())


def test_an_encoded_body_is_the_bytes_as_sent_and_the_cap_counts_those(server):
    # A gzip body of 20 MiB of zeros is about 20 KB: never inflated, so never over a 100 KB cap.
    ds = HttpDataset([server.url("/data/gzip/100000"), server.url("/data/gzip/20000000")], max_bytes=100_000)
    assert load_all(ds) == [gzip_payload(100_000), gzip_payload(20_000_000)]
    assert all(h.get("Accept-Encoding") == "identity" for h in server.headers_seen)
    exact = HttpDataset([server.url("/data/gzip/100000")], max_bytes=len(gzip_payload(100_000)))
    assert one(exact) == gzip_payload(100_000)
    ranged = HttpDataset([server.url("/data/gzip/100000")], byte_range=(0, 10))
    assert one(ranged) == gzip_payload(100_000)[:10]


def test_a_3xx_left_after_redirects_is_an_error_not_data(server):
    ds = HttpDataset([server.url("/data/moved")], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(HttpStatusError) as info:
        next(iter(loader))
    assert info.value.status == 301 and not isinstance(info.value, NotFoundError)
    assert server.total_requests() == 1


# -- timeouts, deadline, cancellation ----------------------------------------------------------


def test_a_hanging_response_times_out_per_attempt_and_is_retried(server):
    ds = HttpDataset([server.url("/data/hang")], timeout=0.2, retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(RetriesExhaustedError) as info:
        next(iter(loader))
    assert info.value.attempts == 3 and isinstance(info.value.last_error, TimeoutError)
    assert wait_until(lambda: server.count("disconnects") == 3)


def test_the_deadline_bounds_an_item_over_all_attempts(server):
    ds = HttpDataset([server.url("/data/hang")], timeout=10, deadline=0.3, retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(DeadlineExceededError) as info:
        next(iter(loader))
    assert isinstance(info.value, TimeoutError)
    assert wait_until(lambda: server.count("disconnects") == 1)


def hang_after(server: HttpServer, fast: int) -> HttpDataset:
    """Items ``0..fast-1`` answer at once, the others never."""
    return HttpDataset(lambda i: server.url("/data/bytes/8" if i < fast else "/data/hang"), length=64)


def test_break_cancels_the_requests_in_flight_and_the_server_sees_it(server):
    with ThreadLoader(hang_after(server, 4), batch_size=4, num_workers=2, item_concurrency=4) as loader:
        for batch in loader:
            assert batch == [payload(8)] * 4
            # Batches 1-3 hang: their items hold every one of the 2 * 4 slots.
            assert wait_until(lambda: server.count("in_flight") == 8)
            break
    assert wait_until(lambda: server.count("disconnects") == 8)
    assert server.count("in_flight") == 0


def test_a_loader_timeout_cancels_its_requests(server):
    with ThreadLoader(hang_after(server, 0), batch_size=2, num_workers=1, item_concurrency=2, timeout=0.3) as loader:
        with pytest.raises(TimeoutError):
            next(iter(loader))
    assert wait_until(lambda: server.count("disconnects") == 2)


def test_close_from_the_middle_of_an_epoch_cancels_and_closes_every_connection(server):
    loader = ThreadLoader(hang_after(server, 8), batch_size=8, num_workers=2, item_concurrency=8)
    it = iter(loader)
    next(it)
    assert wait_until(lambda: server.count("in_flight") == 16)  # 2 * 8 slots, held by batches 1-3
    loader.close()
    assert wait_until(lambda: server.count("disconnects") == 16)


# -- concurrency -------------------------------------------------------------------------------


def gated(server: HttpServer, n: int, **kwargs) -> HttpDataset:
    """``n`` items held at the server's gate until the test releases it."""
    return HttpDataset(lambda i: server.url(f"/data/gate/10?i={i}"), length=n, **kwargs)


def count_items_past_the_gate(server: HttpServer, loader: ThreadLoader, held: int) -> int:
    """Iterate ``loader`` on a thread; once ``held`` requests wait at the gate, release it.
    Returns the number of items loaded."""
    items: list[int] = []
    reader = threading.Thread(target=lambda: items.extend(len(b) for b in loader), name="test-reader")
    reader.start()
    try:
        assert wait_until(lambda: server.count("in_flight") == held), server.count("in_flight")
    finally:
        server.release()
        reader.join(30)
    assert not reader.is_alive()
    return sum(items)


def test_requests_in_flight_reach_workers_times_item_concurrency_on_kept_alive_connections(server):
    with ThreadLoader(gated(server, 64), batch_size=16, num_workers=2, item_concurrency=16) as loader:
        assert count_items_past_the_gate(server, loader, held=32) == 64
    assert server.count("max_in_flight") == 32
    assert server.total_requests() == 64
    assert server.connections_opened() <= 32  # the later requests reused connections


@pytest.mark.parametrize("num_workers,prefetch_factor", [(0, None), (1, 4)])
def test_item_concurrency_beyond_the_batch_is_reached_across_batches(server, num_workers, prefetch_factor):
    # Items are the unit: 128 slots over the batches loading (without workers, as many as they fill).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = ThreadLoader(
            gated(server, 96),
            batch_size=32,
            num_workers=num_workers,
            item_concurrency=128,
            prefetch_factor=prefetch_factor,
            worker_copy="shallow",  # (its locations are a local function: not picklable)
        )
    with loader:
        assert count_items_past_the_gate(server, loader, held=96) == 96
    assert server.count("max_in_flight") == 96


def test_a_prefetch_factor_too_small_for_item_concurrency_is_named(server):
    # The documented rule: max(num_workers, 1) * min(item_concurrency, prefetch_factor * batch_size).
    concurrency._forget_warnings()  # warned once per setting and process: this test sees its own
    with pytest.warns(RuntimeWarning, match="at most 64 items in flight, not 128.*prefetch_factor=4"):
        loader = ThreadLoader(gated(server, 96), batch_size=32, num_workers=1, item_concurrency=128)
    with loader:
        assert count_items_past_the_gate(server, loader, held=64) == 96
    assert server.count("max_in_flight") == 64


def test_max_connections_caps_the_connections_and_so_the_requests_in_flight(server):
    ds = gated(server, 24, max_connections=3)
    with ThreadLoader(ds, batch_size=8, num_workers=2, item_concurrency=8) as loader:
        assert count_items_past_the_gate(server, loader, held=3) == 24
    assert server.count("max_in_flight") == 3
    assert server.connections_opened() == 3


@pytest.mark.parametrize("kind", ["http", "fsspec"])
def test_aclose_leaves_no_task_and_no_connection(server, kind):
    from torch_threadloader.remote import FsspecDataset

    async def main() -> list[asyncio.Task]:
        url = server.url("/data/bytes/10")
        ds = HttpDataset([url]) if kind == "http" else FsspecDataset([url])
        assert await ds[0] == payload(10)
        await ds.aclose()
        await ds.aclose()  # idempotent
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(main()) == []
    assert wait_until(lambda: server.open_connections() == 0)


# -- the three users ---------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers,used_before_fork", [(0, False), (2, False), (2, True)])
def test_torch_dataloader_reads_the_same_batches_through_sync(server, num_workers, used_before_fork):
    sizes = list(range(1, 13))
    ds = HttpDataset(server.url("/data/bytes/{n}"), columns={"n": sizes})
    with ds.sync(concurrency=4) as sync_ds:
        if used_before_fork:  # the parent's loop thread and session exist: each worker makes its own
            assert sync_ds[0] == payload(1)
        got = list(DataLoader(sync_ds, batch_size=4, num_workers=num_workers))
    assert got == [[payload(n) for n in sizes[i : i + 4]] for i in range(0, 12, 4)]


def test_a_bare_async_dataset_in_torch_dataloader_is_a_clear_error_pointing_to_sync(server):
    ds = HttpDataset([server.url("/data/bytes/1")] * 4)
    with pytest.raises(TypeError, match=r"async dataset .* Pass dataset\.sync\(\) instead"):
        next(iter(DataLoader(ds, batch_size=2)))
    assert server.total_requests() == 0


def test_thread_workers_share_one_sync_loop_through_their_copies(server):
    sizes = list(range(1, 9))
    ds = HttpDataset(server.url("/data/bytes/{n}"), columns={"n": sizes})
    with ds.sync() as sync_ds, ThreadLoader(sync_ds, batch_size=2, num_workers=2) as loader:
        assert list(loader) == [[payload(n) for n in sizes[i : i + 2]] for i in range(0, 8, 2)]
        assert [t.name for t in threading.enumerate()].count("threadloader-remote-sync") == 1


def test_sync_raises_the_first_error_as_itself(server):
    ds = HttpDataset([server.url("/data/bytes/1"), server.url("/data/status/404")], retry=FAST)
    with ds.sync() as sync_ds:
        assert sync_ds[0] == payload(1)
        with pytest.raises(NotFoundError):
            sync_ds.__getitems__([0, 1])


def test_a_datapipes_graph_awaits_the_dataset_on_its_loop_and_closes_its_session(server, close_after):
    sizes = [5, 6, 7, 8]
    ds = HttpDataset(server.url("/data/bytes/{n}"), columns={"n": sizes})
    node = dp.AsyncFetcher(dp.Sampler(ds), ds.__getitem__, max_concurrency=4)
    close_after.append(node)
    assert list(node) == [payload(n) for n in sizes]


def test_the_dataset_pickles_without_its_sessions(server):
    ds = HttpDataset([server.url("/data/bytes/9")], max_bytes=100)
    one(ds)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.max_bytes == 100 and len(copy) == 1
    assert one(copy) == payload(9)
    with ds.sync() as sync_ds:
        assert sync_ds[0] == payload(9)  # its loop thread runs; a pickle (spawned worker) carries none
        with pickle.loads(pickle.dumps(sync_ds)) as sync_copy:
            assert sync_copy[0] == payload(9) and sync_copy.concurrency == sync_ds.concurrency


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match="max_bytes"):
        HttpDataset(["x"], max_bytes=-1)
    with pytest.raises(ValueError, match="timeout"):
        HttpDataset(["x"], timeout=0)
    with pytest.raises(ValueError, match="max_connections"):
        HttpDataset(["x"], max_connections=0)
    with pytest.raises(ValueError, match="byte_range"):
        HttpDataset(["x"], byte_range=(5, 5))
    with pytest.raises(TypeError, match="retry"):
        HttpDataset(["x"], retry=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="headers"):
        HttpDataset(["x"], headers=5)  # type: ignore[arg-type]


def test_items_are_bytes_and_collate_into_a_list(server):
    ds = HttpDataset([server.url("/data/bytes/3")] * 2)
    with ThreadLoader(ds, batch_size=2) as loader:
        (batch,) = list(loader)
    assert batch == [payload(3)] * 2 and isinstance(batch[0], bytes)
    assert torch.frombuffer(bytearray(batch[0]), dtype=torch.uint8).tolist() == list(payload(3))


# -- ownership: forks, dropped datasets ---------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_using_the_dataset_leaves_the_parents_connections_working(server):
    # The child makes its own loop and session; the parent's (kept-alive connection included)
    # must stay untouched there, even when the child collects garbage.
    ds = HttpDataset([server.url("/data/bytes/10")], timeout=2, retry=Retry(max_retries=0))
    with ds.sync() as sync_ds:
        assert sync_ds[0] == payload(10)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            ok = False
            try:
                ok = sync_ds[0] == payload(10)
                sync_ds.close()
                del sync_ds
                gc.collect()
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert sync_ds[0] == payload(10)  # on the parent's kept-alive connection, not stuck
    assert server.total_requests() == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_while_another_thread_holds_the_datasets_locks_does_not_deadlock_the_child(server):
    ds = HttpDataset([server.url("/data/bytes/10")], timeout=5, retry=Retry(max_retries=0))
    with ds.sync() as sync_ds:
        assert sync_ds[0] == payload(10)
        with ds._sessions._lock, sync_ds._holder.lock:  # as a thread inside get() at the fork would
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                ok = False
                try:
                    ok = sync_ds[0] == payload(10)
                finally:
                    os._exit(0 if ok else 1)
        for _ in range(1000):  # at most 10 s: a deadlocked child never exits
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child deadlocked on a lock held at the fork")
        assert os.waitstatus_to_exitcode(status) == 0


def test_a_dataset_dropped_while_its_loop_runs_keeps_its_keeper_until_the_loop_closes_it(server):
    async def main() -> int:
        ds = HttpDataset([server.url("/data/bytes/10")])
        assert await ds[0] == payload(10)
        del ds
        gc.collect()
        await asyncio.sleep(0)
        keepers = [t for t in asyncio.all_tasks() if t.get_name() == "threadloader-remote-client"]
        return len(keepers)

    errors: list[dict] = []
    with asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(lambda loop, context: errors.append(context))
        assert runner.run(main()) == 1  # still pending, held: asyncio.run's end cancels it
        gc.collect()
    assert errors == []  # no "Task was destroyed but it is pending", no unclosed session
    assert wait_until(lambda: server.open_connections() == 0)
