"""What the remote datasets' hardening costs per GET, in CPU time.

    python -m benchmarks hardening_cost [--items 4096] [--in-flight 256] [--repeats 5] [--smoke]

An aiohttp server in another process answers 10 KB at once (no latency: the client's CPU is
what is measured), ``--in-flight`` GETs at a time from one event loop (``asyncio.gather``
with a semaphore). Interleaved rounds of three clients on the same server:

- ``bare``: ``session.get(url)`` and ``read()``, what aiohttp alone costs;
- ``unhardened``: ``HttpDataset.__getitem__`` with its hardening taken out: the location not
  checked against the base, not redacted for errors, the GET sent as aiohttp sends it
  (redirects followed by aiohttp, no scope check, no credential stripping, no range or size
  checks), retries and timeouts kept;
- ``HttpDataset``: the dataset as shipped (the location checked as the server will see it,
  redacted, ``open_followed``'s hop-by-hop redirect checks, the response checks).

CPU time is this process's (``getrusage``: every thread; the server's is not counted), so it
holds on a loaded machine better than a wall-clock rate. Records CPU µs per GET per round
and the hardening's share of ``HttpDataset``'s CPU per GET: what it
costs the throughput where the client's CPU is the limit, an upper bound elsewhere. The same
functions run per GET in ``S3Dataset`` and (the location check) ``FsspecDataset``, whose GETs
cost more CPU (SigV4 signing, s3fs): their share is smaller. Each synchronous check is also
timed per call (``timeit``, best of 5).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import timeit
from collections.abc import Awaitable, Callable, Sequence

from benchmarks.remote_throughput import BODY, bare_gets, gather
from benchmarks.result import Recorder, suite_parser
from benchmarks.workloads.remote_http import LocalServer
from torch_threadloader.remote import HttpDataset
from torch_threadloader.remote.errors import redact_url
from torch_threadloader.remote.redirects import _check_scope, _parse
from torch_threadloader.remote.retry import Transient, with_retries


class Unhardened(HttpDataset):
    """``HttpDataset`` without its hardening: the baseline the hardening is measured against."""

    async def __getitem__(self, index: int) -> bytes:  # type: ignore[override]
        location = self.locations._get(index)  # unchecked
        return await with_retries(
            lambda limit: self._plain(location),
            retry=self.retry,
            timeout=self.timeout,
            deadline=self.deadline,
            location=location,
        )

    async def _plain(self, location: str) -> bytes:
        async with self._sessions.get().get(location) as response:
            if response.status >= 300:
                raise Transient(f"HTTP {response.status}")
            return await response.read()


async def _cpu_per_get(get: Callable[[int], Awaitable[bytes]], items: int, in_flight: int) -> float:
    """CPU seconds per GET of ``items`` GETs, ``in_flight`` at a time."""
    timing = await gather(get, items, in_flight)
    return timing.cpu / timing.count


def run_round(base: str, items: int, in_flight: int, turn: int = 0) -> dict[str, float]:
    """One round: each client's CPU µs per GET, on a fresh event loop (its sessions too), the
    clients in an order rotated by ``turn`` (so none is always first after the loop starts)."""

    async def bare_client() -> float:
        timing = await bare_gets(base, items, in_flight)
        return timing.cpu / timing.count

    def dataset_client(cls: type[HttpDataset]) -> Callable[[], Awaitable[float]]:
        async def client() -> float:
            ds = cls(base + "/item/{i}", columns={"i": range(items)})
            try:
                return await _cpu_per_get(ds.__getitem__, items, in_flight)
            finally:
                await ds.aclose()

        return client

    clients: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("bare aiohttp", bare_client),
        ("unhardened", dataset_client(Unhardened)),
        ("HttpDataset", dataset_client(HttpDataset)),
    ]
    turn %= len(clients)

    async def main() -> dict[str, float]:
        out = {name: await client() * 1e6 for name, client in clients[turn:] + clients[:turn]}
        return {name: out[name] for name, _ in clients}

    return asyncio.run(main())


def per_call_costs(items: int = 50_000) -> dict[str, float]:
    """µs per call of the hardening's synchronous checks, each over distinct locations (no
    cache helps), best of 5: what a GET pays for them wherever it is sent from."""
    ds = HttpDataset("http://127.0.0.1:8080/item/{i}", columns={"i": range(items)})
    locations, scope = ds.locations, ds._scope
    assert scope is not None
    urls = [locations._get(i) for i in range(items)]
    parsed = [_parse(u, u) for u in urls]

    def best(fn: Callable[[int], object]) -> float:
        def run() -> None:
            for i in range(items):
                fn(i)

        return min(timeit.repeat(run, number=1, repeat=5)) / items * 1e6

    floor = best(urls.__getitem__)
    return {
        "the location checked against the base (less the unchecked lookup)": best(locations.__getitem__)
        - best(locations._get),
        "the location redacted for errors": best(lambda i: redact_url(urls[i])) - floor,
        "the request checked against the base's scope": best(lambda i: _check_scope(scope, parsed[i], parsed[i], 0, ""))
        - floor,
    }


def main(argv: Sequence[str] | None = None, *, suite: str = "hardening_cost") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--items", type=int, default=4096)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.smoke:
        args.items, args.in_flight, args.repeats = 32, 8, 1
    server = LocalServer(max_requests=3 * args.items * (args.repeats + 1) + 3 * 256 + 100, delay=0.0, size=BODY)
    try:
        base = f"http://127.0.0.1:{server.port}"
        run_round(base, min(args.items, 256), args.in_flight)  # warm-up: imports, first connections
        rounds = [run_round(base, args.items, args.in_flight, turn) for turn in range(args.repeats)]
    finally:
        server.stop()
    recorder = Recorder(suite, argv)
    case = f"{args.items} GETs of 10 KB, {args.in_flight} in flight"
    params = {"items": args.items, "in_flight": args.in_flight}
    for name in rounds[0]:
        recorder.add(case, name, "CPU per GET", [r[name] for r in rounds], "µs", **params)
    shares = [(r["HttpDataset"] - r["unhardened"]) / r["HttpDataset"] * 100 for r in rounds]
    recorder.add(case, "HttpDataset - unhardened", "hardening's share of the CPU per GET", shares, "%", **params)
    costs = per_call_costs(items=1_000 if args.smoke else 50_000)
    for name, us in costs.items():
        recorder.add("synchronous checks, per call", name, "CPU per call", [us], "µs")
    total, top = sum(costs.values()), statistics.median(r["HttpDataset"] for r in rounds)
    recorder.add(case, "synchronous checks together", "share of HttpDataset's CPU per GET", [total / top * 100], "%")
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
