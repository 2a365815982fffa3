"""A local aiohttp server for the ``remote_http`` workload, run in its own process.

``python _http_server.py --delay 0.01 --size 16384 --max-requests N [--any-path] [--sample-every S]``
listens on 127.0.0.1 on a free port and prints ``PORT <n>``; ``GET /item/<i>`` (with
``--any-path``: a GET of any path, as an S3 stub for ``/bucket/key``) answers ``size`` bytes
after ``delay`` seconds, with the ``ETag`` and ``Last-Modified`` an S3 client reads. It serves at most ``max-requests`` requests (more get
503, so a runaway client fails loudly) and stops when its standard input closes (its parent
closed it, or died), printing ``SERVED <n>``.

The GETs in flight (received, not yet answered) are sampled every ``sample-every`` seconds
(5 ms) between ``GET /_bench/start`` and ``GET /_bench/stop``, from the first GET received to
the last answered; ``stop`` answers the samples as JSON (``{"samples": [...]}``). Neither
counts as a request served.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading

from aiohttp import web

__all__ = ["main"]


class InFlight:
    """The GETs being answered, sampled at a fixed interval while a run is observed: from the
    first GET it sends to the last answered (the client's start and close are not sampled)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.now = 0
        self.samples: list[int] | None = None  # None: not observing
        self.started = False

    def enter(self) -> None:
        self.now += 1
        self.started = self.samples is not None

    async def sample(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            if self.samples is not None and self.started:
                self.samples.append(self.now)

    async def start(self, request: web.Request) -> web.Response:
        self.samples, self.started = [], False
        return web.json_response({})

    async def stop(self, request: web.Request) -> web.Response:
        samples, self.samples = self.samples or [], None
        while samples and samples[-1] == 0:  # after the last answer
            samples.pop()
        return web.json_response({"samples": samples})


async def serve(delay: float, size: int, max_requests: int, any_path: bool = False, sample_every: float = 0.005) -> int:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    headers = {"ETag": '"0123456789abcdef0123456789abcdef"', "Last-Modified": "Wed, 21 Oct 2015 07:28:00 GMT"}
    served = 0
    in_flight = InFlight(sample_every)

    async def item(request: web.Request) -> web.Response:
        nonlocal served
        if served >= max_requests:
            return web.Response(status=503, text="request budget of this benchmark run exhausted")
        served += 1
        in_flight.enter()
        try:
            await asyncio.sleep(delay)
            return web.Response(body=payload, content_type="application/octet-stream", headers=headers)
        finally:
            in_flight.now -= 1

    app = web.Application()
    app.router.add_get("/_bench/start", in_flight.start)
    app.router.add_get("/_bench/stop", in_flight.stop)
    app.router.add_get("/{tail:.*}" if any_path else "/item/{index}", item)
    sampler = asyncio.get_running_loop().create_task(in_flight.sample())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]
    print(f"PORT {port}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = asyncio.Event()

    def watch_stdin() -> None:
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(stdin_closed.set)

    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    try:
        await stdin_closed.wait()
    finally:
        sampler.cancel()
        await runner.cleanup()
    return served


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.01)
    parser.add_argument("--size", type=int, default=16 * 1024)
    parser.add_argument("--max-requests", type=int, default=1_000_000)
    parser.add_argument("--any-path", action="store_true", help="answer a GET of any path (an S3 stub)")
    parser.add_argument("--sample-every", type=float, default=0.005, help="seconds between samples of GETs in flight")
    args = parser.parse_args(argv)
    served = asyncio.run(serve(args.delay, args.size, args.max_requests, args.any_path, args.sample_every))
    print(f"SERVED {served}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
