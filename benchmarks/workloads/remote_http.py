"""remote_http: real HTTP requests to a local aiohttp server that answers 16 KiB after 10 ms."""

from __future__ import annotations

import asyncio
import http.client
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import torch
from torch.utils.data import Dataset

from benchmarks.harness import Case, Scale, Target, Workload, gather, steps, threadloader, torch_configs
from torch_threadloader.remote import HttpDataset as RemoteHttpDataset

__all__ = ["WORKLOAD", "AsyncHttpDataset", "HttpDataset", "LocalServer"]

PAYLOAD_BYTES = 16 * 1024
LATENCY_S = 0.010
IN_FLIGHT = 128


def _to_tensor(body: bytes, expected: int = PAYLOAD_BYTES) -> torch.Tensor:
    if len(body) != expected:
        raise RuntimeError(f"expected {expected} bytes, got {len(body)}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8)


class HttpDataset(Dataset[torch.Tensor]):
    """Item ``i``: ``GET /item/i`` with a blocking client (``http.client``), one keep-alive
    connection per thread and process; the body as a uint8 tensor."""

    def __init__(self, host: str, port: int, size: int, body_bytes: int = PAYLOAD_BYTES) -> None:
        self.host = host
        self.port = port
        self.size = size
        self.body_bytes = body_bytes
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[http.client.HTTPConnection] = []

    def __len__(self) -> int:
        return self.size

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():  # new thread, or a forked worker
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._lock:
                self._connections.append(conn)
        return conn

    def __getitem__(self, index: int) -> torch.Tensor:
        conn = self._connection()
        try:
            conn.request("GET", f"/item/{index}")
            response = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionError):  # an idle keep-alive closed: once more
            conn.close()
            conn.request("GET", f"/item/{index}")
            response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET /item/{index}: HTTP {response.status}")
        return _to_tensor(body, self.body_bytes)

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    def __getstate__(self) -> dict[str, Any]:  # forked workers copy it; spawned ones would pickle it
        return {"host": self.host, "port": self.port, "size": self.size, "body_bytes": self.body_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["host"], state["port"], state["size"], state["body_bytes"])  # type: ignore[misc]


class AsyncHttpDataset(Dataset[torch.Tensor]):
    """Item ``i``: ``GET /item/i`` with ``aiohttp``: one ``ClientSession`` per event loop
    (keep-alive, up to ``limit`` connections) made at the loop's first request and closed by
    ``aclose()`` on that loop, which ``ThreadLoader.close()`` awaits (a session belongs to the
    loop it was made on: loaders that keep their loop may share the dataset)."""

    def __init__(self, base_url: str, size: int, limit: int = IN_FLIGHT) -> None:
        self.base_url = base_url
        self.size = size
        self.limit = limit
        # Each entry is touched only by its own loop's thread.
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}

    def __len__(self) -> int:
        return self.size

    async def __getitem__(self, index: int) -> torch.Tensor:  # type: ignore[override]
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            session = self._sessions[loop] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.limit), raise_for_status=True
            )
        async with session.get(f"{self.base_url}/item/{index}") as response:
            return _to_tensor(await response.read())

    async def aclose(self) -> None:
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()


class LocalServer:
    """The ``_http_server`` module in a child process; ``stop()`` closes its standard input
    and returns how many requests it served."""

    def __init__(
        self, max_requests: int, delay: float = LATENCY_S, size: int = PAYLOAD_BYTES, *, any_path: bool = False
    ) -> None:
        # Run as a script, by its path: it needs only aiohttp, and no package on sys.path.
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).parent.parent / "_http_server.py"),
                f"--delay={delay}",
                f"--size={size}",
                f"--max-requests={max_requests}",
                *(["--any-path"] if any_path else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the benchmark HTTP server did not start (said {line!r})")
        self.port = int(line.split()[1])

    def stop(self) -> int:
        try:
            out, _ = self.proc.communicate(timeout=30)  # closes its standard input
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        for line in out.decode().splitlines():
            if line.startswith("SERVED "):
                return int(line.split()[1])
        raise RuntimeError("the benchmark HTTP server did not report its request count")


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    items = scale.pick(512, 128, 32)
    configs = [
        threadloader(num_workers=16),
        threadloader(num_workers=4, item_concurrency=32),
        threadloader(num_workers=4, item_concurrency=32, dataset="async"),
        threadloader(num_workers=4, item_concurrency=32, persistent_workers=True, dataset="async"),
        threadloader(num_workers=0, item_concurrency=128, dataset="async"),
        gather(128),
        threadloader(num_workers=4, item_concurrency=32, dataset="HttpDataset"),
        threadloader(num_workers=4, item_concurrency=32, persistent_workers=True, dataset="HttpDataset"),
        threadloader(num_workers=0, item_concurrency=128, dataset="HttpDataset"),
        gather(128, dataset="HttpDataset"),
        *torch_configs(16),
    ]
    # Every epoch (warm-up included) makes one request per item.
    expected = items * steps(Case("", configs, items, 32), scale)
    server = LocalServer(max_requests=2 * expected)
    blocking = HttpDataset("127.0.0.1", server.port, items)
    case = Case(
        "GET 16 KiB, 10 ms",
        configs=configs,
        items=items,
        batch_size=32,
        datasets={
            "default": blocking,
            "async": AsyncHttpDataset(f"http://127.0.0.1:{server.port}", items),
            # The library's dataset: bytes per item (collated into a list), retries, caps, typed errors.
            "HttpDataset": RemoteHttpDataset(f"http://127.0.0.1:{server.port}/item/{{i}}", columns={"i": range(items)}),
        },
        helper_pids=(server.proc.pid,),
        notes="An aiohttp server in its own process on 127.0.0.1 answers 16 KiB after 10 ms. "
        "Blocking: `http.client` with a keep-alive connection per thread (per process in torch's "
        "workers); async: one `aiohttp.ClientSession`, 4 x 32 = 128 requests in flight; HttpDataset: "
        "`torch_threadloader.remote.HttpDataset` (bytes per item, retries, size checks), 128 in flight.",
    )
    completed = False
    try:
        yield [case]
        completed = True
    finally:
        blocking.close()
        served = server.stop()
    case.extra.update(requests_served=served, requests_expected=expected)
    if completed and served != expected:
        raise RuntimeError(f"remote_http: the server served {served} requests, expected {expected}")


WORKLOAD = Workload(
    name="remote_http",
    description="A real aiohttp server on 127.0.0.1 answering 16 KiB after 10 ms: blocking client "
    "(`http.client`, 16 workers) vs async `aiohttp` with 128 in flight; 512 items, batch 32.",
    cases=_cases,
    targets=[
        Target("remote_http (async)", "GET 16 KiB, 10 ms", "ThreadLoader nw=4 ic=32 async", "speedup", 2.8),
        Target("remote_http (HttpDataset)", "GET 16 KiB, 10 ms", "ThreadLoader nw=4 ic=32 HttpDataset", "speedup", 2.8),
        *(
            Target(
                f"remote_http ({dataset} {setting}), share of a bare asyncio gather",
                "GET 16 KiB, 10 ms",
                f"ThreadLoader {setting} {dataset}",
                "speedup",
                0.9,
                (gather(128, dataset=dataset).label,),
            )
            for dataset in ("async", "HttpDataset")
            # Each keeps its event loop (and so its connections) across epochs, as the gather does.
            for setting in ("nw=0 ic=128", "nw=4 ic=32 persistent")
        ),
    ],
)
