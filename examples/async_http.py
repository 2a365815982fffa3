"""An async dataset over HTTP: hundreds of requests in flight from one event-loop thread.

Starts a local aiohttp server on 127.0.0.1 that answers each request with 16 KiB after 10 ms
(a stand-in for object storage), then loads 512 items through ThreadLoader with an
``async def __getitem__``. Offline: nothing leaves this machine.

    python examples/async_http.py [--items 512] [--in-flight 128]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time

import aiohttp
import torch
from aiohttp import web
from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader

PAYLOAD = bytes(range(256)) * 64  # 16 KiB


class LocalServer:
    """An aiohttp server on its own thread and loop, on 127.0.0.1 and a free port."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="example-http-server", daemon=True)
        self.port = 0

    async def _item(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)
        return web.Response(body=PAYLOAD)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/item/{i}", self._item)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    def __enter__(self) -> LocalServer:
        self.thread.start()
        self.ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


class HttpItems(Dataset):
    """Item ``i`` is the body of ``GET {base}/item/{i}`` as a uint8 tensor."""

    def __init__(self, base_url: str, count: int) -> None:
        self.base_url = base_url
        self.count = count
        self.session: aiohttp.ClientSession | None = None

    def __len__(self) -> int:
        return self.count

    async def __getitem__(self, i: int) -> torch.Tensor:
        if self.session is None:  # made on the loader's event loop, used only there
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        async with self.session.get(f"{self.base_url}/item/{i}") as response:
            response.raise_for_status()
            return torch.frombuffer(bytearray(await response.read()), dtype=torch.uint8)

    async def aclose(self) -> None:
        """Awaited by ``ThreadLoader.close()``."""
        if self.session is not None:
            await self.session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=512)
    parser.add_argument("--in-flight", type=int, default=128, help="requests in flight (item_concurrency)")
    args = parser.parse_args()
    with LocalServer() as server:
        dataset = HttpItems(f"http://127.0.0.1:{server.port}", args.items)
        with ThreadLoader(dataset, batch_size=args.in_flight, item_concurrency=args.in_flight) as loader:
            start = time.perf_counter()
            total = sum(batch.shape[0] for batch in loader)
            elapsed = time.perf_counter() - start
    print(
        f"{total} items of 16 KiB, 10 ms each, {args.in_flight} in flight: {total / elapsed:.0f} items/s "
        f"(one at a time would be at most {1 / 0.01:.0f} items/s)"
    )


if __name__ == "__main__":
    main()
