"""Byte ranges against real servers on 127.0.0.1 that answer them well and badly: a 206 as
asked, aligned 64 KiB blocks, a range's end ignored, a 200 with the whole object, and a
wrong ``Content-Range``. ``HttpDataset``, ``S3Dataset`` (a misbehaving server standing in
as its endpoint, and moto) and ``FsspecDataset`` over http and over ``s3://``: each item is
exactly the bytes asked for, or a clear error naming it; never more than the range is read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from tests.fixtures.loading import one
from tests.fixtures.servers import BUCKET, HttpServer, aws_env, moto, payload, socket_buffer_bytes
from tests.fixtures.threads import wait_until
from torch_threadloader.remote import (
    FsspecDataset,
    HttpDataset,
    RangeError,
    RemoteDataset,
    Retry,
    S3Dataset,
    TooLargeError,
)

__all__ = ["aws_env", "moto"]  # fixtures used here
pytestmark = pytest.mark.usefixtures("aws_env")  # S3Dataset and s3fs sign with fake credentials

#: The object every path of the range server holds.
SIZE = 200_000
OBJECT = payload(SIZE)
BLOCK = 64 * 1024
#: The declared size of the ``/huge-*`` objects, streamed with back-pressure.
HUGE = 64 << 20
NO_RETRY = Retry(max_retries=0)


class RangeServer(HttpServer):
    """Every path ``/{mode}/...`` is ``OBJECT`` (``/huge-{mode}/...``: ``HUGE`` bytes of
    ``x``), answered to a ``Range`` header (parsed by aiohttp) as ``mode`` says:

    - ``exact``: a 206 of the range (cut at the object's end), ``Content-Range`` right;
    - ``star``: the same with ``/*`` for the object's length; ``star-short``: 10 bytes of it;
    - ``aligned``: the 64 KiB block holding the range's start;
    - ``noend``: from the range's start to the object's end;
    - ``whole``: a 200 with the whole object;
    - ``shifted``: the range one byte later, declared so; ``missing``: no ``Content-Range``;
      ``garbage``: an unparseable one; ``longer`` / ``shorter``: 10 bytes more / fewer than
      the ``Content-Range`` declares (``Content-Length`` the body's); ``longer-chunked`` /
      ``shorter-chunked``: the same without ``Content-Length``.

    ``endless_bytes`` counts what a ``/huge-*`` answer sent."""

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._track])
        app.router.add_get("/{mode}/{tail:.*}", self._answer)
        return app

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        mode = request.match_info["mode"]
        if mode.startswith("huge-"):
            return await self._huge_range(request, mode[5:])
        asked = request.http_range
        start = asked.start or 0
        stop = min(SIZE, asked.stop if asked.stop is not None else SIZE)
        if mode == "whole" or request.headers.get("Range") is None:
            return web.Response(body=OBJECT)
        first, last, total = start, stop - 1, str(SIZE)
        body_from, body_to = start, stop
        if mode == "star":
            total = "*"
        elif mode == "star-short":
            total, last, body_to = "*", start + 9, start + 10
        elif mode == "aligned":
            first = start // BLOCK * BLOCK
            last = min(first + BLOCK, SIZE) - 1
            body_from, body_to = first, last + 1
        elif mode == "noend":
            last, body_to = SIZE - 1, SIZE
        elif mode == "shifted":
            first, last, body_from, body_to = start + 1, stop, start + 1, stop + 1
        elif mode.startswith("longer"):
            body_to = stop + 10
        elif mode.startswith("shorter"):
            body_to = stop - 10
        headers = {"Content-Range": f"bytes {first}-{last}/{total}"}
        if mode == "missing":
            headers = {}
        elif mode == "garbage":
            headers = {"Content-Range": f"bytes={first}-{last}"}
        body = OBJECT[body_from:body_to]
        if not mode.endswith("chunked"):
            return web.Response(status=206, body=body, headers=headers)
        response = web.StreamResponse(status=206, headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        return response

    async def _huge_range(self, request: web.Request, mode: str) -> web.StreamResponse:
        """``HUGE`` bytes of ``x``: ``noend`` a 206 from the range's start to the end,
        ``whole`` a 200; 1 KiB at a time, as fast as the client reads."""
        start = request.http_range.start or 0
        if mode == "noend":
            status, length = 206, HUGE - start
            headers = {"Content-Range": f"bytes {start}-{HUGE - 1}/{HUGE}", "Content-Length": str(length)}
        else:
            status, length, headers = 200, HUGE, {"Content-Length": str(HUGE)}
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        chunk = b"x" * 1024
        for _ in range(length // 1024):
            await response.write(chunk)
            with self.lock:
                self.endless_bytes += len(chunk)
        await response.write_eof()
        return response


@pytest.fixture(scope="module")
def range_server() -> Iterator[RangeServer]:
    srv = RangeServer().start()
    yield srv
    srv.stop()


# -- the three datasets, each reading path ``/{mode}/obj`` of the range server ---------------------
def http_dataset(range_server: RangeServer, mode: str, **kwargs: Any) -> RemoteDataset:
    return HttpDataset([range_server.url(f"/{mode}/obj")], retry=NO_RETRY, **kwargs)


def s3_dataset(range_server: RangeServer, mode: str, **kwargs: Any) -> RemoteDataset:
    # Path-style addressing on an IP endpoint: GET /{bucket}/{key}; the server ignores the signature.
    return S3Dataset([f"s3://{mode}/obj"], endpoint_url=range_server.url(""), retry=NO_RETRY, **kwargs)


def fsspec_http_dataset(range_server: RangeServer, mode: str, **kwargs: Any) -> RemoteDataset:
    return FsspecDataset([range_server.url(f"/{mode}/obj")], retry=NO_RETRY, **kwargs)


DATASETS: dict[str, Callable[..., RemoteDataset]] = {
    "http": http_dataset,
    "s3": s3_dataset,
    "fsspec-http": fsspec_http_dataset,
}


#: (mode, byte_range): the exact bytes come back.
GOOD = [
    ("exact", (100, 200)),
    ("exact", (SIZE - 50, SIZE + 50)),  # the object ends inside the range: its last 50 bytes
    ("star", (100, 200)),
    ("aligned", (100, 200)),  # inside the first block
    ("aligned", (BLOCK + 7, BLOCK + 1000)),  # inside the second
    ("noend", (100, 200)),
    ("noend", (SIZE - 50, SIZE + 50)),
    ("whole", (100, 200)),
    ("whole", (SIZE - 50, SIZE + 50)),
]

#: (mode, byte_range, what the error says).
BAD = [
    ("aligned", (BLOCK - 10, BLOCK + 10), "does not hold"),  # crosses a block: not all of it was sent
    ("shifted", (100, 200), "does not hold"),
    ("missing", (100, 200), "not a valid one"),
    ("garbage", (100, 200), "not a valid one"),
    ("star-short", (100, 200), "does not hold"),
    ("longer", (100, 200), "Content-Length"),
    ("shorter", (100, 200), "Content-Length"),
    ("longer-chunked", (100, 200), "longer than its Content-Range"),
    ("shorter-chunked", (100, 200), "short of its Content-Range"),
    ("whole", (SIZE + 10, SIZE + 20), "ends before"),
]


@pytest.mark.parametrize("kind", DATASETS)
@pytest.mark.parametrize(("mode", "byte_range"), GOOD)
def test_a_range_is_exactly_its_bytes_however_the_server_sends_them(range_server, kind, mode, byte_range):
    ds = DATASETS[kind](range_server, mode, byte_range=byte_range)
    assert one(ds) == OBJECT[byte_range[0] : byte_range[1]]


@pytest.mark.parametrize("kind", DATASETS)
@pytest.mark.parametrize(("mode", "byte_range", "says"), BAD)
def test_a_range_the_server_got_wrong_is_a_clear_error_naming_the_item(range_server, kind, mode, byte_range, says):
    ds = DATASETS[kind](range_server, mode, byte_range=byte_range)
    with pytest.raises(RangeError, match=says) as info:
        one(ds)
    assert f"/{mode}/obj" in str(info.value) and f"/{mode}/obj" in info.value.location
    assert range_server.total_requests() == 1  # not retried: the same server gives the same answer


@pytest.mark.parametrize("kind", DATASETS)
@pytest.mark.parametrize("mode", ["exact", "aligned", "noend", "whole"])
def test_max_bytes_counts_the_range_not_the_object(range_server, kind, mode):
    assert one(DATASETS[kind](range_server, mode, byte_range=(100, 200), max_bytes=100)) == OBJECT[100:200]
    with pytest.raises(TooLargeError):
        one(DATASETS[kind](range_server, mode, byte_range=(100, 200), max_bytes=99))


@pytest.mark.parametrize("kind", DATASETS)
@pytest.mark.parametrize("mode", ["noend", "whole"])
@pytest.mark.parametrize("max_bytes", [None, 1 << 20])
def test_no_more_than_the_range_is_read_from_the_wire(range_server, kind, mode, max_bytes):
    """A huge object whose server ignores the range's end (or the whole range): the item is
    the range, and the server could send no more than it plus what the sockets hold."""
    start, stop = 1000, 1100
    ds = DATASETS[kind](range_server, f"huge-{mode}", byte_range=(start, stop), max_bytes=max_bytes)
    assert one(ds) == b"x" * (stop - start)
    assert wait_until(lambda: range_server.count("disconnects") == 1)  # the rest was never read
    assert range_server.count("endless_bytes") <= stop + socket_buffer_bytes() + 1024


def test_s3_ranges_on_moto_are_exact_including_the_objects_end(moto):
    key = f"s3://{BUCKET}/sizes/{300_000:07d}.bin"
    raw = payload(300_000)
    for byte_range in [(0, 1), (1000, 1100), (299_990, 300_010)]:
        got = one(S3Dataset([key], endpoint_url=moto.endpoint, byte_range=byte_range))
        assert got == raw[byte_range[0] : byte_range[1]]


# -- FsspecDataset over s3://: s3fs's ranged GET (its cat_file), checked for length --------------
def fsspec_s3(range_server: RangeServer, mode: str, **kwargs: Any) -> RemoteDataset:
    options = {"endpoint_url": range_server.url("")}
    return FsspecDataset([f"s3://{mode}/obj"], storage_options=options, retry=NO_RETRY, **kwargs)


@pytest.mark.parametrize(("mode", "byte_range"), [("exact", (100, 200)), ("exact", (SIZE - 50, SIZE + 50))])
def test_fsspec_over_s3_returns_a_range_s3fs_read(range_server, mode, byte_range):
    assert one(fsspec_s3(range_server, mode, byte_range=byte_range)) == OBJECT[byte_range[0] : byte_range[1]]


@pytest.mark.parametrize("mode", ["aligned", "noend", "whole"])
def test_fsspec_over_s3_refuses_more_bytes_than_the_range(range_server, mode):
    """s3fs returns whatever body came; a body longer than the range is a ``RangeError``
    naming the item (one of the same length elsewhere in the object cannot be seen: s3fs
    does not return the ``Content-Range``)."""
    with pytest.raises(RangeError, match="did not keep to the range") as info:
        one(fsspec_s3(range_server, mode, byte_range=(BLOCK + 7, BLOCK + 1000)))
    assert f"s3://{mode}/obj" in str(info.value)
