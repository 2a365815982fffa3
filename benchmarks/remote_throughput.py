"""Remote datasets against their baselines, side by side in one run, repeated.

    python -m benchmarks.remote_throughput [--repeats 3] [--latency 0.05] [--quick]

- **http**: an aiohttp server in another process answers 10 KB after ``latency`` (50 ms).
  For 64, 128 and 256 requests in flight: ``HttpDataset`` through ThreadLoader (one event
  loop thread; ``num_workers = in_flight / 32``, ``item_concurrency = batch_size = 32``)
  beside a bare ``asyncio.gather`` of aiohttp GETs (one session, a semaphore), each as a
  fraction of ``in_flight / latency``; the same loader with ``defer_stragglers=True`` (the
  same in-flight bound shared by the samples, none held by a finished batch's slowest); and
  torch's DataLoader with 16 worker processes and a blocking client (``http.client``,
  keep-alive) on the same server.
- **s3**: the same server answering any path (an S3 stub: no 150 requests/s cap as with
  moto), 64, 128 and 256 GETs in flight: ``S3Dataset`` (SigV4 by botocore, sent with aiohttp)
  through ThreadLoader and in a bare gather, ``FsspecDataset`` over ``s3://`` through
  ThreadLoader, s3fs's own one-GET path (async ``_cat_file(max_concurrency=1)``) in a bare
  gather, and unsigned bare aiohttp GETs (the ceiling); GET/s and CPU time per GET of this
  process (``getrusage``: every thread, not the server's), and per-repeat ratios (S3Dataset /
  unsigned bare, FsspecDataset / s3fs).

Prints markdown tables: the median of the repeats and their range, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from torch.utils.data import DataLoader

from benchmarks.workloads.remote_http import HttpDataset as BlockingHttpDataset
from benchmarks.workloads.remote_http import LocalServer
from torch_threadloader import ThreadLoader
from torch_threadloader.remote import FsspecDataset, HttpDataset, S3Dataset

__all__ = ["main"]

BODY = 10 * 1024
BATCH = 32


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


Timing = tuple[float, float, int]  # wall seconds, CPU seconds of this process, items


def timed(run: Callable[[], int]) -> Timing:
    """The timing of ``run()`` (which returns its number of items)."""
    cpu, start = cpu_seconds(), time.perf_counter()
    items = run()
    return time.perf_counter() - start, cpu_seconds() - cpu, items


async def _gather(get: Callable[[Any, int], Any], items: int, in_flight: int, session: Any) -> Timing:
    """The timing of ``items`` GETs with ``in_flight`` at once (the client's setup is not timed)."""
    semaphore = asyncio.Semaphore(in_flight)

    async def one(i: int) -> int:
        async with semaphore:
            return len(await get(session, i))

    cpu, start = cpu_seconds(), time.perf_counter()
    sizes = await asyncio.gather(*(one(i) for i in range(items)))
    timing = time.perf_counter() - start, cpu_seconds() - cpu, len(sizes)
    assert all(s == BODY for s in sizes), "a body of the wrong size"
    return timing


def bare_aiohttp(base: str, items: int, in_flight: int) -> Timing:
    async def get(session: aiohttp.ClientSession, i: int) -> bytes:
        async with session.get(f"{base}/item/{i}") as response:
            response.raise_for_status()
            return await response.read()

    async def main() -> Timing:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            return await _gather(get, items, in_flight, session)

    return asyncio.run(main())


def through_loader(dataset: Any, in_flight: int, defer_stragglers: bool = False) -> int:
    workers = max(1, in_flight // BATCH)
    with ThreadLoader(
        dataset, batch_size=BATCH, num_workers=workers, item_concurrency=BATCH, defer_stragglers=defer_stragglers
    ) as loader:
        count = 0
        for batch in loader:
            assert all(len(b) == BODY for b in batch)
            count += len(batch)
    return count


def torch_blocking(port: int, items: int) -> int:
    dataset = BlockingHttpDataset("127.0.0.1", port, items, body_bytes=BODY)
    try:
        loader = DataLoader(dataset, batch_size=BATCH, num_workers=16)
        return sum(len(b) for b in loader)
    finally:
        dataset.close()


def s3_bare(dataset: S3Dataset, items: int, in_flight: int) -> Timing:
    async def get(_session: Any, i: int) -> bytes:
        return await dataset[i]

    async def main() -> Timing:
        try:
            return await _gather(get, items, in_flight, None)
        finally:
            await dataset.aclose()

    return asyncio.run(main())


def s3fs_bare(endpoint: str, items: int, in_flight: int) -> Timing:
    import s3fs

    async def main() -> Timing:
        fs = s3fs.S3FileSystem(
            asynchronous=True,
            skip_instance_cache=True,
            endpoint_url=endpoint,
            config_kwargs={"max_pool_connections": in_flight},
        )
        session = await fs.set_session()

        async def get(_session: Any, i: int) -> bytes:
            # max_concurrency=1: s3fs's one-GET path (above 1 it sends a HEAD first for the size)
            body: bytes = await fs._cat_file(f"bench/{i}.bin", max_concurrency=1)
            return body

        try:
            return await _gather(get, items, in_flight, None)
        finally:
            await session.close()

    return asyncio.run(main())


def summarize(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g} – {max(values):.3g})"


def http_section(args: argparse.Namespace) -> None:
    levels = [64, 128] if args.quick else [64, 128, 256]
    waves = 4 if args.quick else 8
    budget = sum(n * waves for n in levels) * (args.repeats + 1) * 3 + 16 * 64 * (args.repeats + 1) + 10_000
    server = LocalServer(max_requests=budget, delay=args.latency, size=BODY)
    base = f"http://127.0.0.1:{server.port}"
    load = os.getloadavg()
    try:
        rows = []
        torch_rates: list[float] = []
        torch_items = 16 * (8 if args.quick else 20)
        for n in levels:
            items = n * waves
            ideal = n / args.latency
            ds = HttpDataset(base + "/item/{i}", columns={"i": range(items)})
            through_loader(ds, n)  # warm-up: imports, first connections
            bare_rates, tl_rates, ready_rates = [], [], []
            for _ in range(args.repeats):
                wall, _cpu, count = bare_aiohttp(base, items, n)
                bare_rates.append(count / wall)
                wall, _cpu, count = timed(functools.partial(through_loader, ds, n))
                tl_rates.append(count / wall)
                wall, _cpu, count = timed(functools.partial(through_loader, ds, n, True))
                ready_rates.append(count / wall)
                if n == levels[-1]:
                    wall, _cpu, count = timed(functools.partial(torch_blocking, server.port, torch_items))
                    torch_rates.append(count / wall)
            tl_over_bare = ratios(tl_rates, bare_rates)
            rows.append(
                f"| {n} | {ideal:.0f} | {summarize(tl_rates)} | {summarize([r / ideal * 100 for r in tl_rates])} | "
                f"{summarize(bare_rates)} | {summarize([r / ideal * 100 for r in bare_rates])} | {summarize(tl_over_bare)} | "
                f"{summarize(ratios(ready_rates, bare_rates))} |"
            )
    finally:
        served = server.stop()
    print(
        f"\n### HTTP: 10 KB bodies, {args.latency * 1000:.0f} ms per request, {args.repeats} repeats "
        f"({served} requests; load average {load[0]:.1f} at the start)\n"
    )
    print(
        "| in flight | ideal items/s | HttpDataset + ThreadLoader items/s | % of ideal | bare asyncio.gather items/s "
        "| % of ideal | ThreadLoader / bare | with defer_stragglers / bare |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    tl_top = statistics.median(tl_rates)
    print(
        f"\ntorch DataLoader, 16 worker processes, blocking `http.client`: {summarize(torch_rates)} items/s; "
        f"ThreadLoader with {levels[-1]} in flight / torch: {tl_top / statistics.median(torch_rates):.1f}x"
    )


def s3_runs(endpoint: str, items: int, n: int) -> dict[str, Callable[[], Timing]]:
    """The S3 clients, each a callable timing one run of ``items`` GETs with ``n`` in flight."""
    # One dataset per client for all runs: botocore (and s3fs) resolve once, in the warm-up, as in training.
    dataset = S3Dataset("s3://bench/{i}.bin", columns={"i": range(items)}, endpoint_url=endpoint)
    over_fsspec = FsspecDataset(
        "s3://bench/{i}.bin", columns={"i": range(items)}, storage_options={"endpoint_url": endpoint}
    )
    return {
        S3_TL: functools.partial(timed, functools.partial(through_loader, dataset, n)),
        "S3Dataset, bare gather": functools.partial(s3_bare, dataset, items, n),
        FSSPEC_TL: functools.partial(timed, functools.partial(through_loader, over_fsspec, n)),
        S3FS: functools.partial(s3fs_bare, endpoint, items, n),
        UNSIGNED: functools.partial(bare_aiohttp, endpoint, items, n),
    }


S3_TL = "S3Dataset + ThreadLoader"
FSSPEC_TL = "FsspecDataset s3:// + ThreadLoader"
S3FS = "s3fs `_cat_file` (one GET), bare gather"
UNSIGNED = "bare aiohttp GETs, unsigned (the ceiling)"


def s3_level(args: argparse.Namespace, endpoint: str, n: int) -> dict[str, tuple[list[float], list[float]]]:
    """GET/s and CPU ms per GET of each client at ``n`` in flight, per repeat (clients interleaved)."""
    items = n * (4 if args.quick else 8)
    runs = s3_runs(endpoint, items, n)
    results: dict[str, tuple[list[float], list[float]]] = {}
    for run in runs.values():
        run()  # warm-up
    for _ in range(args.repeats):
        for name, run in runs.items():
            wall, cpu, count = run()
            rates, cpus = results.setdefault(name, ([], []))
            rates.append(count / wall)
            cpus.append(cpu / count * 1000)
    return results


def s3_section(args: argparse.Namespace) -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "AKIABENCHBENCHBENCH0")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench-secret")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    levels = [64] if args.quick else [64, 128, 256]
    budget = sum(n * (4 if args.quick else 8) for n in levels) * (args.repeats + 1) * 12
    server = LocalServer(max_requests=budget, delay=args.latency, size=BODY, any_path=True)
    endpoint = f"http://127.0.0.1:{server.port}"
    load = os.getloadavg()
    try:
        by_level = {n: s3_level(args, endpoint, n) for n in levels}
    finally:
        served = server.stop()
    print(
        f"\n### S3 stub: 10 KB objects, {args.latency * 1000:.0f} ms per GET, {args.repeats} repeats "
        f"({served} requests; load average {load[0]:.1f} at the start)\n"
    )
    print("| in flight | client | GET/s | CPU ms per GET (this process) |")
    print("|---|---|---|---|")
    for n, results in by_level.items():
        for name, (rates, cpus) in results.items():
            print(f"| {n} | {name} | {summarize(rates)} | {summarize(cpus)} |")
    print("\n| in flight | S3Dataset + ThreadLoader / unsigned bare | FsspecDataset s3:// / s3fs one GET |")
    print("|---|---|---|")
    for n, results in by_level.items():
        signed = ratios(results[S3_TL][0], results[UNSIGNED][0])
        fsspec = ratios(results[FSSPEC_TL][0], results[S3FS][0])
        print(f"| {n} | {summarize(signed)} | {summarize(fsspec)} |")


def ratios(a: list[float], b: list[float]) -> list[float]:
    """Per repeat (the clients ran side by side in each), ``a / b``."""
    return [x / y for x, y in zip(a, b, strict=True)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--quick", action="store_true", help="fewer items and levels (a smoke run)")
    parser.add_argument("--only", choices=["http", "s3"], default=None)
    args = parser.parse_args(argv)
    if args.only in (None, "http"):
        http_section(args)
    if args.only in (None, "s3"):
        s3_section(args)


if __name__ == "__main__":
    main()
