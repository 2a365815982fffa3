"""A local aiohttp server for the ``remote_http`` workload, run in its own process.

``python _http_server.py --delay 0.01 --size 16384 --max-requests N [--any-path]``
listens on 127.0.0.1 on a free port and prints ``PORT <n>``; ``GET /item/<i>`` (with
``--any-path``: a GET of any path, as an S3 stub for ``/bucket/key``) answers ``size`` bytes
after ``delay`` seconds, with the ``ETag`` and ``Last-Modified`` an S3 client reads. It serves at most ``max-requests`` requests (more get
503, so a runaway client fails loudly) and stops when its standard input closes (its parent
closed it, or died), printing ``SERVED <n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading

from aiohttp import web

__all__ = ["main"]


async def serve(delay: float, size: int, max_requests: int, any_path: bool = False) -> int:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    headers = {"ETag": '"0123456789abcdef0123456789abcdef"', "Last-Modified": "Wed, 21 Oct 2015 07:28:00 GMT"}
    served = 0

    async def item(request: web.Request) -> web.Response:
        nonlocal served
        if served >= max_requests:
            return web.Response(status=503, text="request budget of this benchmark run exhausted")
        served += 1
        await asyncio.sleep(delay)
        return web.Response(body=payload, content_type="application/octet-stream", headers=headers)

    app = web.Application()
    app.router.add_get("/{tail:.*}" if any_path else "/item/{index}", item)
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
        await runner.cleanup()
    return served


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.01)
    parser.add_argument("--size", type=int, default=16 * 1024)
    parser.add_argument("--max-requests", type=int, default=1_000_000)
    parser.add_argument("--any-path", action="store_true", help="answer a GET of any path (an S3 stub)")
    args = parser.parse_args(argv)
    served = asyncio.run(serve(args.delay, args.size, args.max_requests, args.any_path))
    print(f"SERVED {served}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
