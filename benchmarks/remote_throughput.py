"""Remote datasets against their baselines, side by side in one run, repeated.

    python -m benchmarks remote_throughput [--repeats 3] [--latency 0.05] [--quick | --smoke] [--only http|s3]

- **http**: an aiohttp server in another process answers 10 KB after ``latency`` (50 ms).
  For 64, 128 and 256 requests in flight: ``HttpDataset`` through ThreadLoader (one event
  loop thread; ``num_workers = in_flight / 32``, ``item_concurrency = batch_size = 32``; and
  ``num_workers=0, item_concurrency=in_flight``) beside a bare ``asyncio.gather`` of aiohttp GETs (one session, a semaphore), each as a
  fraction of ``in_flight / latency``; the same loader with ``defer_stragglers=True`` (the
  same in-flight bound shared by the samples, none held by a finished batch's slowest); and
  torch's DataLoader with 16 worker processes and a blocking client (``http.client``,
  keep-alive) on the same server.
- **s3**: the same server answering any path (an S3 stub: no 150 requests/s cap as with
  moto), 64, 128 and 256 GETs in flight: ``S3Dataset`` (SigV4 by botocore, sent with aiohttp)
  through ThreadLoader and in a bare gather, a bare gather of aiohttp GETs signed by botocore
  as ``S3Dataset`` signs them (``GetSigner``), ``FsspecDataset`` over ``s3://`` through
  ThreadLoader, s3fs's own one-GET path (async ``_cat_file(max_concurrency=1)``) in a bare
  gather, and unsigned bare aiohttp GETs (the ceiling); per-repeat ratios (S3Dataset /
  signed bare, S3Dataset / unsigned bare, FsspecDataset / s3fs).

Beside each rate, from the same run: the CPU time per GET of this process (``getrusage``:
every thread, not the server's; not for torch's worker processes, which are other
processes) and the GETs in flight over the run, as the server saw them (received, not yet
answered), sampled every 5 ms from the first GET received to the last answered: their mean
and 10th percentile. Records every figure per
repeat, with the load average at the start of each section: the machine may be shared.
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import json
import os
import statistics
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import botocore.session
from torch.utils.data import DataLoader
from yarl import URL

from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import Timing, quantile, ratios, timed, timed_async
from benchmarks.workloads.remote_http import HttpDataset as BlockingHttpDataset
from benchmarks.workloads.remote_http import LocalServer
from torch_threadloader import ThreadLoader
from torch_threadloader.remote import FsspecDataset, HttpDataset, S3Dataset
from torch_threadloader.remote.signing import GetSigner, host_of

__all__ = ["Observed", "bare_gets", "gather", "main", "observed", "signed_gets"]

BODY = 10 * 1024
BATCH = 32
TORCH = "torch DataLoader, 16 worker processes, blocking http.client"


async def gather(get: Callable[[int], Awaitable[bytes]], items: int, in_flight: int) -> Timing:
    """The timing of ``items`` GETs with ``in_flight`` at once (the client's setup is not timed)."""
    semaphore = asyncio.Semaphore(in_flight)

    async def one(i: int) -> int:
        async with semaphore:
            return len(await get(i))

    async def run() -> int:
        sizes = await asyncio.gather(*(one(i) for i in range(items)))
        assert all(s == BODY for s in sizes), "a body of the wrong size"
        return len(sizes)

    return await timed_async(run)


async def bare_gets(base: str, items: int, in_flight: int) -> Timing:
    """``items`` GETs of ``base/item/{i}`` with aiohttp alone (one session), ``in_flight`` at once."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def get(i: int) -> bytes:
            async with session.get(f"{base}/item/{i}") as response:
                response.raise_for_status()
                return await response.read()

        return await gather(get, items, in_flight)


def bare_aiohttp(base: str, items: int, in_flight: int) -> Timing:
    return asyncio.run(bare_gets(base, items, in_flight))


def through_loader(dataset: Any, in_flight: int, defer_stragglers: bool = False, *, workers: bool = True) -> int:
    """An epoch of ``dataset`` with ``in_flight`` items at once: ``num_workers = in_flight /
    BATCH, item_concurrency = BATCH``, or (``workers=False``) ``num_workers=0,
    item_concurrency=in_flight``."""
    num_workers = max(1, in_flight // BATCH) if workers else 0
    concurrency = BATCH if workers else in_flight
    with ThreadLoader(
        dataset,
        batch_size=BATCH,
        num_workers=num_workers,
        item_concurrency=concurrency,
        defer_stragglers=defer_stragglers,
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
    async def main() -> Timing:
        try:
            return await gather(dataset.__getitem__, items, in_flight)
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

        async def get(i: int) -> bytes:
            # max_concurrency=1: s3fs's one-GET path (above 1 it sends a HEAD first for the size)
            body: bytes = await fs._cat_file(f"bench/{i}.bin", max_concurrency=1)
            return body

        try:
            return await gather(get, items, in_flight)
        finally:
            await session.close()

    return asyncio.run(main())


async def signed_gets(endpoint: str, items: int, in_flight: int) -> Timing:
    """``items`` GETs of ``endpoint/bench/{i}.bin`` with aiohttp alone (one session), each signed
    by botocore as :class:`S3Dataset` signs it (``GetSigner``, the credentials botocore finds)."""
    credentials = botocore.session.Session().get_credentials().get_frozen_credentials()
    signer, base = GetSigner("us-east-1"), f"{endpoint}/bench/"
    host = host_of(base)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def get(i: int) -> bytes:
            url = f"{base}{i}.bin"
            headers = signer.headers(url, host, {}, credentials)
            async with session.get(URL(url, encoded=True), headers=headers) as response:
                response.raise_for_status()
                return await response.read()

        return await gather(get, items, in_flight)


@dataclass(frozen=True)
class Observed:
    """One run: its timing and the GETs in flight the server sampled during it."""

    timing: Timing
    in_flight: list[int]

    def figures(self) -> dict[str, float]:
        """GET/s, CPU µs per GET (this process), mean and p10 of the GETs in flight."""
        t, samples = self.timing, self.in_flight or [0]
        return {
            "GET/s": t.count / t.wall,
            "CPU per GET": t.cpu / t.count * 1e6,
            "in flight, mean": statistics.fmean(samples),
            "in flight, p10": float(quantile(samples, 0.1)),
        }


#: Each figure's unit.
UNITS = {"GET/s": "GET/s", "CPU per GET": "µs", "in flight, mean": "GETs", "in flight, p10": "GETs"}


def _control(port: int, what: str) -> Any:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", f"/_bench/{what}")
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def observed(port: int, run: Callable[[], Timing]) -> Observed:
    """``run()``, with the server sampling the GETs in flight while it runs."""
    _control(port, "start")
    try:
        timing = run()
    finally:
        samples = _control(port, "stop")["samples"]
    return Observed(timing, samples)


def _measure(port: int, runs: dict[str, Callable[[], Timing]], repeats: int) -> dict[str, list[Observed]]:
    """Every run once per repeat, in turn, each observed; warm-ups are the caller's."""
    out: dict[str, list[Observed]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            out[name].append(observed(port, run))
    return out


def _record(
    recorder: Recorder,
    case: str,
    name: str,
    runs: list[Observed],
    params: dict[str, Any],
    skip: tuple[str, ...] = (),
) -> None:
    figures = [r.figures() for r in runs]
    for metric, unit in UNITS.items():
        if metric not in skip:
            recorder.add(case, name, metric, [f[metric] for f in figures], unit, **params)


def _rates(runs: list[Observed]) -> list[float]:
    return [r.timing.count / r.timing.wall for r in runs]


NW0 = "HttpDataset + ThreadLoader, nw=0"


def http_section(recorder: Recorder, levels: list[int], waves: int, repeats: int, latency: float) -> None:
    budget = sum(n * waves for n in levels) * (repeats + 1) * 3 + 16 * 64 * (repeats + 1) + 10_000
    server = LocalServer(max_requests=budget, delay=latency, size=BODY)
    base = f"http://127.0.0.1:{server.port}"
    load = os.getloadavg()[0]
    torch_items = 16 * (8 if waves < 8 else 20)
    try:
        for n in levels:
            items = n * waves
            ds = HttpDataset(base + "/item/{i}", columns={"i": range(items)})
            through_loader(ds, n)  # warm-up: imports, first connections
            runs: dict[str, Callable[[], Timing]] = {
                "bare asyncio.gather": functools.partial(bare_aiohttp, base, items, n),
                "HttpDataset + ThreadLoader": functools.partial(timed, functools.partial(through_loader, ds, n)),
                NW0: functools.partial(timed, functools.partial(through_loader, ds, n, workers=False)),
                "with defer_stragglers": functools.partial(timed, functools.partial(through_loader, ds, n, True)),
            }
            if n == levels[-1]:
                runs[TORCH] = functools.partial(timed, functools.partial(torch_blocking, server.port, torch_items))
            results = _measure(server.port, runs, repeats)
            case = f"HTTP, {n} in flight"
            params = {"in_flight": n, "latency_s": latency, "load_average": load}
            for name, observed_runs in results.items():
                # torch's CPU is spent in its worker processes, which getrusage(SELF) does not see
                _record(recorder, case, name, observed_runs, params, ("CPU per GET",) if name == TORCH else ())
                if name != TORCH:
                    ideal = [r * latency / n * 100 for r in _rates(observed_runs)]
                    recorder.add(case, name, "share of ideal", ideal, "%", **params)
            bare = _rates(results["bare asyncio.gather"])
            for name in ("HttpDataset + ThreadLoader", NW0, "with defer_stragglers"):
                recorder.add(case, f"{name} / bare", "ratio", ratios(_rates(results[name]), bare), "x", **params)
            if TORCH in results:
                ours = ratios(_rates(results["HttpDataset + ThreadLoader"]), _rates(results[TORCH]))
                recorder.add(case, "HttpDataset + ThreadLoader / torch", "ratio", ours, "x", **params)
    finally:
        server.stop()


S3_TL = "S3Dataset + ThreadLoader"
S3_TL0 = "S3Dataset + ThreadLoader, nw=0"
FSSPEC_TL = "FsspecDataset s3:// + ThreadLoader"
FSSPEC_TL0 = "FsspecDataset s3:// + ThreadLoader, nw=0"
S3FS = "s3fs `_cat_file` (one GET), bare gather"
SIGNED = "bare aiohttp GETs, signed by botocore as S3Dataset signs"
UNSIGNED = "bare aiohttp GETs, unsigned (the ceiling)"


def s3_runs(endpoint: str, items: int, n: int) -> dict[str, Callable[[], Timing]]:
    """The S3 clients, each a callable timing one run of ``items`` GETs with ``n`` in flight."""
    # One dataset per client for all runs: botocore (and s3fs) resolve once, in the warm-up, as in training.
    dataset = S3Dataset("s3://bench/{i}.bin", columns={"i": range(items)}, endpoint_url=endpoint)
    over_fsspec = FsspecDataset(
        "s3://bench/{i}.bin", columns={"i": range(items)}, storage_options={"endpoint_url": endpoint}
    )
    return {
        S3_TL: functools.partial(timed, functools.partial(through_loader, dataset, n)),
        S3_TL0: functools.partial(timed, functools.partial(through_loader, dataset, n, workers=False)),
        "S3Dataset, bare gather": functools.partial(s3_bare, dataset, items, n),
        SIGNED: lambda: asyncio.run(signed_gets(endpoint, items, n)),
        FSSPEC_TL: functools.partial(timed, functools.partial(through_loader, over_fsspec, n)),
        FSSPEC_TL0: functools.partial(timed, functools.partial(through_loader, over_fsspec, n, workers=False)),
        S3FS: functools.partial(s3fs_bare, endpoint, items, n),
        UNSIGNED: functools.partial(bare_aiohttp, endpoint, items, n),
    }


def s3_section(recorder: Recorder, levels: list[int], waves: int, repeats: int, latency: float) -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "AKIABENCHBENCHBENCH0")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench-secret")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    budget = sum(n * waves for n in levels) * (repeats + 1) * 14
    server = LocalServer(max_requests=budget, delay=latency, size=BODY, any_path=True)
    endpoint = f"http://127.0.0.1:{server.port}"
    load = os.getloadavg()[0]
    try:
        for n in levels:
            runs = s3_runs(endpoint, n * waves, n)
            for run in runs.values():
                run()  # warm-up
            results = _measure(server.port, runs, repeats)
            case = f"S3 stub, {n} in flight"
            params = {"in_flight": n, "latency_s": latency, "load_average": load}
            for name, observed_runs in results.items():
                _record(recorder, case, name, observed_runs, params)
            rates = {name: _rates(observed_runs) for name, observed_runs in results.items()}
            recorder.add(case, f"{S3_TL} / signed bare", "ratio", ratios(rates[S3_TL], rates[SIGNED]), "x")
            recorder.add(case, f"{S3_TL0} / signed bare", "ratio", ratios(rates[S3_TL0], rates[SIGNED]), "x")
            recorder.add(case, f"{S3_TL} / unsigned bare", "ratio", ratios(rates[S3_TL], rates[UNSIGNED]), "x")
            recorder.add(case, f"{FSSPEC_TL} / s3fs one GET", "ratio", ratios(rates[FSSPEC_TL], rates[S3FS]), "x")
            recorder.add(case, f"{FSSPEC_TL0} / s3fs one GET", "ratio", ratios(rates[FSSPEC_TL0], rates[S3FS]), "x")
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None, *, suite: str = "remote_throughput") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--quick", action="store_true", help="fewer items and levels")
    parser.add_argument("--only", choices=["http", "s3"], default=None)
    args = parser.parse_args(argv)
    small = args.quick or args.smoke
    if args.smoke:
        args.repeats, args.latency = 1, 0.01
    recorder = Recorder(suite, argv)
    if args.only in (None, "http"):
        http_section(recorder, [64, 128] if small else [64, 128, 256], 4 if small else 8, args.repeats, args.latency)
    if args.only in (None, "s3"):
        s3_section(recorder, [64] if small else [64, 128, 256], 4 if small else 8, args.repeats, args.latency)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
