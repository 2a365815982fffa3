"""FsspecDataset: local files on threads (plain paths and file://), HTTP and S3 through
fsspec's async filesystems on the loader's loop; the same locations, caps and errors."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pytest
from fsspec.spec import AbstractFileSystem
from torch.utils.data import DataLoader

from tests.fixtures.loading import load_all
from tests.fixtures.servers import BUCKET, HttpServer, aws_env, moto, payload, socket_buffer_bytes
from tests.fixtures.threads import wait_until
from torch_threadloader import ThreadLoader
from torch_threadloader.remote import (
    FsspecDataset,
    HttpStatusError,
    LocationError,
    ReadTimeoutError,
    RetriesExhaustedError,
    Retry,
    TooLargeError,
)
from torch_threadloader.remote.http import CHUNK_BYTES

__all__ = ["aws_env", "moto"]  # fixtures used here

FAST = Retry(max_retries=2, initial_backoff=0.001, max_backoff=0.01, jitter=0)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    for n in (0, 10, 1000):
        (tmp_path / f"{n:05d}.bin").write_bytes(payload(n))
    return tmp_path


def test_local_paths_and_file_urls(files):
    paths = [str(files / f"{n:05d}.bin") for n in (0, 10, 1000)]
    assert load_all(FsspecDataset(paths), num_workers=2) == [payload(n) for n in (0, 10, 1000)]
    urls = ["file://" + p for p in paths]
    assert load_all(FsspecDataset(urls)) == [payload(n) for n in (0, 10, 1000)]


def test_a_template_over_local_files_refuses_traversal(files):
    (files.parent / "secret.bin").write_bytes(b"secret")
    ds = FsspecDataset(str(files) + "/{name}", columns={"name": ["00010.bin", "../secret.bin"]})
    with ThreadLoader(ds, batch_size=None) as loader:
        it = iter(loader)
        assert next(it) == payload(10)
        with pytest.raises(LocationError, match="item 1"):
            next(it)


def test_a_missing_file_is_file_not_found_not_retried(files):
    ds = FsspecDataset([str(files / "nope.bin")], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(FileNotFoundError):
        next(iter(loader))


def test_max_bytes_and_byte_range_on_local_files(files):
    path = str(files / "01000.bin")
    assert load_all(FsspecDataset([path], max_bytes=1000)) == [payload(1000)]
    with ThreadLoader(FsspecDataset([path], max_bytes=999), batch_size=None) as loader:
        with pytest.raises(TooLargeError):
            next(iter(loader))
    assert load_all(FsspecDataset([path], byte_range=(5, 15), max_bytes=10)) == [payload(1000)[5:15]]


def test_http_through_fsspec_is_awaited_and_its_session_closed(server):
    server.reset()
    ds = FsspecDataset([server.url(f"/data/bytes/{n}") for n in (1, 2000)], retry=FAST)
    assert load_all(ds, num_workers=2) == [payload(1), payload(2000)]
    assert wait_until(lambda: server.open_connections() == 0)


def items_and_in_flight_at_the_gate(
    server: HttpServer, ds: FsspecDataset, in_flight: int, held: int | None = None
) -> tuple[list[Any], int]:
    """``ds`` through ThreadLoader with ``in_flight`` items asked for at once, every request
    held at the server's gate until ``held`` (default ``in_flight``) are there or 30 s pass;
    the items, and the requests in flight at the release."""
    out: list[Any] = []
    with ThreadLoader(ds, batch_size=32, num_workers=in_flight // 32, item_concurrency=32) as loader:
        reader = threading.Thread(target=lambda: out.extend(b for batch in loader for b in batch), name="test-reader")
        reader.start()
        try:
            wait_until(lambda: server.count("in_flight") >= (held or in_flight), timeout=30)
            at_release = server.count("in_flight")
        finally:
            server.release()
            reader.join(60)
    assert not reader.is_alive()
    return out, at_release


def test_http_through_fsspec_keeps_as_many_requests_in_flight_as_the_loader_asks(server):
    """fsspec's session is aiohttp's default (a connector of 100 connections): it held a
    loader asking for 128 at 100. Unless ``client_kwargs`` or ``get_client`` say otherwise,
    the session's connector is unbounded, as :class:`HttpDataset`'s, and the loader bounds it."""
    server.reset()
    ds = FsspecDataset([server.url(f"/data/gate/10?i={i}") for i in range(128)], retry=FAST)
    out, held = items_and_in_flight_at_the_gate(server, ds, 128)
    assert held == 128, f"only {held} requests were in flight, 128 asked for"
    assert out == [payload(10)] * 128
    assert server.count("max_in_flight") == 128


def test_http_through_fsspec_keeps_a_get_client_set_in_storage_options(server):
    """A ``get_client`` (or a ``connector`` in ``client_kwargs``) is the caller's: it caps the requests."""
    import aiohttp

    async def capped(**kwargs: Any) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4), **kwargs)

    server.reset()
    ds = FsspecDataset(
        [server.url(f"/data/gate/10?i={i}") for i in range(64)], retry=FAST, storage_options={"get_client": capped}
    )
    out, held = items_and_in_flight_at_the_gate(server, ds, 64, held=4)
    assert held == 4
    assert out == [payload(10)] * 64
    assert server.count("max_in_flight") == 4


def test_http_transient_statuses_are_retried_and_missing_is_not_found(server):
    server.reset()
    ds = FsspecDataset([server.url("/data/flaky/fs/2/503")], retry=FAST)
    assert load_all(ds) == [payload(64)]
    assert server.total_requests() == 3
    always = FsspecDataset([server.url("/data/flaky/fsx/100/502")], retry=FAST)
    with ThreadLoader(always, batch_size=None) as loader, pytest.raises(RetriesExhaustedError):
        next(iter(loader))
    missing = FsspecDataset([server.url("/data/status/404")], retry=FAST)
    with ThreadLoader(missing, batch_size=None) as loader, pytest.raises(FileNotFoundError):
        next(iter(loader))
    assert wait_until(lambda: server.open_connections() == 0)


def test_torch_dataloader_through_sync(files):
    ds = FsspecDataset(str(files) + "/{n:05d}.bin", columns={"n": [0, 10, 1000]})
    with ds.sync() as sync_ds:
        assert list(DataLoader(sync_ds, batch_size=None)) == [payload(n) for n in (0, 10, 1000)]


def test_storage_options_must_be_a_mapping():
    with pytest.raises(TypeError, match="storage_options"):
        FsspecDataset(["x"], storage_options=["anon"])  # type: ignore[arg-type]


def test_s3_through_s3fs_on_the_loaders_loop(moto):
    options = {"endpoint_url": moto.endpoint}
    ds = FsspecDataset(f"s3://{BUCKET}/train/{{i:04d}}.bin", columns={"i": range(5)}, storage_options=options)
    assert load_all(ds, num_workers=2) == [payload(100, salt=i) for i in range(5)]
    missing = FsspecDataset([f"s3://{BUCKET}/nope.bin"], storage_options=options, retry=FAST)
    with ThreadLoader(missing, batch_size=None) as loader, pytest.raises(FileNotFoundError):
        next(iter(loader))


def test_http_byte_range_is_enforced_on_a_server_that_ignores_range(server):
    server.reset()
    ds = FsspecDataset([server.url("/data/bytes/1000"), server.url("/data/bytes/1000?chunked=1")], byte_range=(10, 20))
    assert load_all(ds) == [payload(1000)[10:20]] * 2


def test_http_max_bytes_reads_no_more_than_the_cap_plus_one_chunk(server):
    server.reset()
    declared = FsspecDataset([server.url("/data/huge/100000000")], max_bytes=1000, retry=FAST)
    with ThreadLoader(declared, batch_size=None) as loader, pytest.raises(TooLargeError) as info:
        next(iter(loader))
    assert info.value.size == 100_000_000  # refused from Content-Length
    assert wait_until(lambda: server.count("disconnects") == 1)
    assert server.count("endless_bytes") < socket_buffer_bytes() + (1 << 20)
    server.reset()
    endless = FsspecDataset([server.url("/data/endless")], max_bytes=10_000, retry=FAST)
    with ThreadLoader(endless, batch_size=None) as loader, pytest.raises(TooLargeError) as info:
        next(iter(loader))
    assert info.value.size is None
    assert wait_until(lambda: server.count("disconnects") == 1)
    sent = server.count("endless_bytes")
    assert sent < 10_000 + CHUNK_BYTES + socket_buffer_bytes() + (1 << 20)
    assert wait_until(lambda: server.count("endless_bytes") == sent)
    exact = FsspecDataset([server.url("/data/bytes/1000?chunked=1")], max_bytes=1000)
    assert load_all(exact) == [payload(1000)]
    assert wait_until(lambda: server.open_connections() == 0)


def test_http_a_3xx_left_after_redirects_and_a_redirect_leaving_the_base_are_errors(server):
    server.reset()
    moved = FsspecDataset([server.url("/data/moved")], retry=FAST)
    with ThreadLoader(moved, batch_size=None) as loader, pytest.raises(HttpStatusError) as info:
        next(iter(loader))
    assert info.value.status == 301
    ds = FsspecDataset(server.url("/data/{p}"), columns={"p": ["redirect?to=/data/bytes/5", "redirect?to=/secret"]})
    with ThreadLoader(ds, batch_size=None) as loader:
        it = iter(loader)
        assert next(it) == payload(5)
        with pytest.raises(LocationError, match="leaves the base"):
            next(it)
    assert server.count("outside_hits") == 0
    assert wait_until(lambda: server.open_connections() == 0)


class GatedFileSystem(AbstractFileSystem):  # type: ignore[misc]
    """A synchronous filesystem whose reads wait for ``gate`` (a test releases it); counts reads."""

    protocol = "tl-gated"
    gate = threading.Event()
    reads: ClassVar[list[str]] = []

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        type(self).reads.append(path)
        if not type(self).gate.wait(10):
            raise RuntimeError("the test never released the gate")
        return b"read"


def test_a_sync_filesystem_read_past_its_timeout_is_not_retried(monkeypatch):
    fsspec.register_implementation(GatedFileSystem.protocol, GatedFileSystem, clobber=True)
    monkeypatch.setattr(GatedFileSystem, "reads", [])
    GatedFileSystem.gate.clear()
    ds = FsspecDataset([f"{GatedFileSystem.protocol}://a"], timeout=0.05, retry=FAST)
    loader = ThreadLoader(ds, batch_size=None)
    try:
        with pytest.raises(ReadTimeoutError) as info:
            next(iter(loader))
        assert isinstance(info.value, TimeoutError) and "not retried" in str(info.value)
        assert GatedFileSystem.reads == ["a"]  # one read on a thread, no second beside it
    finally:
        GatedFileSystem.gate.set()  # the read finishes; closing the loader waits for its thread
        loader.close()


@pytest.mark.parametrize("path", ["/data/status/404", "/data/status/500", "/data/status/403"])
def test_http_errors_and_their_causes_show_no_credential(server, path):
    import traceback

    url = server.url(path).replace("http://", "http://alice:hunter2@") + "?token=s3cret"
    ds = FsspecDataset([url], retry=FAST)
    with ThreadLoader(ds, batch_size=None) as loader, pytest.raises(Exception) as info:
        next(iter(loader))
    assert isinstance(info.value, FileNotFoundError) == path.endswith("404")
    text = "".join(traceback.format_exception(info.value)) + repr(info.value)
    assert "hunter2" not in text and "s3cret" not in text, text
    assert path in text
