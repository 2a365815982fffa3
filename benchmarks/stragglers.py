"""Stragglers: ``defer_stragglers=True`` beside ``in_order=True``, ``in_order=False`` and torch.

    python -m benchmarks.stragglers [--samples 2048] [--repeats 3] [--ms 2] [--step-ms 2]

Per-sample cost is heavy-tailed: a lognormal latency (median ``--ms``, sigma 0.5) and 1% of
samples 20x slower, spent in ``time.sleep`` (the GIL released, as I/O; the draws are fixed
per index). Two families, each with the same in-flight budget (``--workers`` x
``--concurrency`` samples): threads (a sync dataset, ``num_workers`` x ``item_concurrency``)
and async (``async def __getitem__``). Each ThreadLoader mode runs against torch's
``DataLoader`` at its best of ``num_workers`` in (2, 4, 8) (processes, in order). The consumer
runs a ``--step-ms`` step (a sleep) after each batch. Per configuration: samples per second of
the epoch and the p99 of ``next()``'s wait; rounds are interleaved, and the ratios to
``in_order=False`` and to torch's best are taken per round: median and range shown.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from torch_threadloader import ThreadLoader


def latencies(n: int, ms: float, seed: int = 0) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    base = torch.empty(n).log_normal_(0.0, 0.5, generator=g) * (ms / 1000)
    slow = torch.rand(n, generator=g) < 0.01
    return (base * torch.where(slow, 20.0, 1.0)).tolist()


class Sleepy(Dataset[int]):
    def __init__(self, delays: list[float]) -> None:
        self.delays = delays

    def __len__(self) -> int:
        return len(self.delays)

    def __getitem__(self, i: int) -> int:
        time.sleep(self.delays[i])
        return i


class AsyncSleepy(Sleepy):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        await asyncio.sleep(self.delays[i])
        return i


def run_epoch(loader: Iterable[Any], step_s: float) -> tuple[float, float]:
    """(samples per second, p99 of next()'s wait in ms) over one epoch."""
    waits: list[float] = []
    samples = 0
    start = time.perf_counter()
    it = iter(loader)
    while True:
        t = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - t)
        samples += len(batch)
        time.sleep(step_s)
    wall = time.perf_counter() - start
    waits.sort()
    return samples / wall, waits[min(len(waits) - 1, int(0.99 * len(waits)))] * 1e3


def configs(args: argparse.Namespace, delays: list[float]) -> dict[str, Callable[[], Iterable[Any]]]:
    bs, w, c = args.batch_size, args.workers, args.concurrency
    out: dict[str, Callable[[], Iterable[Any]]] = {}
    for family, data in (("threads", Sleepy(delays)), ("async", AsyncSleepy(delays))):
        for mode, kw in (
            ("in_order=True", {}),
            ("in_order=False", {"in_order": False}),
            ("defer_stragglers", {"defer_stragglers": True}),
        ):
            out[f"{family} {mode}"] = _threadloader(data, bs, w, c, kw)
    for n in (2, 4, 8):
        out[f"torch nw={n}"] = _torch(Sleepy(delays), bs, n)
    return out


def _threadloader(data: Any, bs: int, w: int, c: int, kw: dict[str, Any]) -> Callable[[], Iterable[Any]]:
    def make() -> Iterable[Any]:
        return ThreadLoader(data, batch_size=bs, num_workers=w, item_concurrency=c, **kw)

    return make


def _torch(data: Any, bs: int, n: int) -> Callable[[], Iterable[Any]]:
    def make() -> Iterable[Any]:
        return DataLoader(data, batch_size=bs, num_workers=n)

    return make


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--ms", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    delays = latencies(args.samples, args.ms)
    made = configs(args, delays)
    rates: dict[str, list[float]] = {k: [] for k in made}
    p99: dict[str, list[float]] = {k: [] for k in made}
    for _ in range(args.repeats):
        for name, make in made.items():
            loader = make()
            rate, wait = run_epoch(loader, args.step_ms / 1000)
            close = getattr(loader, "close", None)
            if close is not None:
                close()
            rates[name].append(rate)
            p99[name].append(wait)
    torch_best = [max(rates[f"torch nw={n}"][r] for n in (2, 4, 8)) for r in range(args.repeats)]
    print(f"{'configuration':<28} {'samples/s':>10} {'p99 wait ms':>12}   vs in_order=False      vs torch's best")
    for name in made:
        family = name.split()[0]
        line = f"{name:<28} {statistics.median(rates[name]):>10.0f} {statistics.median(p99[name]):>12.2f}"
        if family in ("threads", "async"):
            ref = rates[f"{family} in_order=False"]
            vs_false = [a / b for a, b in zip(rates[name], ref, strict=True)]
            vs_torch = [a / b for a, b in zip(rates[name], torch_best, strict=True)]
            line += f"   {spread(vs_false):<22} {spread(vs_torch)}"
        print(line)


if __name__ == "__main__":
    main()
