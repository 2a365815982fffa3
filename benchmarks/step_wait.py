"""The training step's wait: what one ``next()`` costs after a step, when loading keeps up.

    python -m benchmarks.step_wait [--steps 300] [--repeats 3] [--quick]

A training loop runs a step, then asks for the next batch. When the loader keeps up, the batch
is ready and ``next()`` should cost what taking a ready item from a queue costs. For each
setting the consumer runs a step of 2, 10 or 20 ms, either waiting with the GIL released
(``time.sleep``: a step waiting for the accelerator) or holding it (a pure-Python loop: host-side
work), then times ``next()``; p50 / p90 / p99 over ``--steps`` steps after a warm-up, with
2 and 8 workers, for:

- the ceiling measured in the same run: a producer thread that puts ready batches on a plain
  ``queue.Queue`` (this machine's own wake-up and GIL hand-over cost);
- ``ThreadLoader`` over a map-style, an ``IterableDataset`` and an async dataset, and with
  ``worker_processes`` (one process per worker, one thread each);
- torch's ``DataLoader`` with the same number of worker processes.

Each setting is repeated ``--repeats`` times, in turn (loaders interleaved round by round);
each figure is the median over repeats with the range over repeats in brackets, and the ratio
to the queue's p50 / p99 of the same round. The target: ThreadLoader's p50 within
1.5x of the queue's (or 15 us), its p99 within 2x (or 100 us).
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from benchmarks.workloads.overhead import IndexDataset as Items
from torch_threadloader import ThreadLoader

BATCH = 32
WARMUP = 20


class AsyncItems(Items):
    """The same items from ``async def __getitem__``."""

    async def __getitem__(self, index: int) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        return index


class StreamItems(IterableDataset[int]):
    """``range(size)``, sharded by worker as torch's docs shard an ``IterableDataset``."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        if info is None:
            return iter(range(self.size))
        return iter(range(info.id, self.size, info.num_workers))


class QueueCeiling:
    """A producer thread putting ready batches on a bounded ``queue.Queue``: the floor."""

    def __init__(self, batches: int, depth: int) -> None:
        self.batches = batches
        self.depth = depth

    def __iter__(self) -> Iterator[Any]:
        out: queue.Queue[Any] = queue.Queue(maxsize=self.depth)
        done = object()
        stop = threading.Event()

        def produce() -> None:
            for b in range(self.batches):
                batch = default_collate(list(range(b * BATCH, (b + 1) * BATCH)))
                while not stop.is_set():
                    try:
                        out.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
            out.put(done)

        thread = threading.Thread(target=produce, name="step-wait-producer", daemon=True)
        thread.start()
        try:
            while (item := out.get()) is not done:
                yield item
        finally:
            stop.set()
            while thread.is_alive():
                try:
                    out.get_nowait()
                except queue.Empty:
                    thread.join(0.05)


def gil_released(seconds: float) -> None:
    time.sleep(seconds)


def gil_held(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


STEPS: dict[str, Callable[[float], None]] = {"GIL released": gil_released, "GIL held": gil_held}


def loaders(workers: int, batches: int) -> dict[str, Callable[[], Any]]:
    """Each setting's loader factory, over exactly ``batches`` batches."""
    size = batches * BATCH
    common: dict[str, Any] = {"batch_size": BATCH, "num_workers": workers}
    return {
        "queue.Queue (ceiling)": lambda: QueueCeiling(batches, depth=2 * workers),
        "ThreadLoader map": lambda: ThreadLoader(Items(size), **common),
        "ThreadLoader iterable": lambda: ThreadLoader(StreamItems(size), **common),
        "ThreadLoader async": lambda: ThreadLoader(AsyncItems(size), **common),
        "ThreadLoader processes": lambda: ThreadLoader(
            Items(size), batch_size=BATCH, num_workers=1, worker_processes=workers
        ),
        "torch DataLoader": lambda: DataLoader(Items(size), **common),
    }


def waits(loader: Any, step: Callable[[float], None], seconds: float, steps: int) -> list[float]:
    """``next()``'s wall time in microseconds after each of ``steps`` steps (warm-up excluded)."""
    it = iter(loader)
    try:
        for _ in range(WARMUP):
            next(it)
        out = []
        for _ in range(steps):
            step(seconds)
            start = time.perf_counter_ns()
            next(it)
            out.append((time.perf_counter_ns() - start) / 1000)
        return out
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
        del it
        if isinstance(loader, ThreadLoader):
            loader.close()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def spread(values: list[float], digits: int = 0) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def run_setting(workers: int, kind: str, ms: float, steps: int, repeats: int, names: Sequence[str] | None) -> list[str]:
    """Markdown rows for one (workers, step kind, step length): every loader, repeated."""
    factories = loaders(workers, WARMUP + steps + 4 * workers + 2)
    if names:
        factories = {k: v for k, v in factories.items() if k in names or k.startswith("queue")}
    figures: dict[str, dict[str, list[float]]] = {
        n: {"p50": [], "p90": [], "p99": [], "r50": [], "r99": []} for n in factories
    }
    for _ in range(repeats):
        round_figures = {}
        for name, make in factories.items():
            w = waits(make(), STEPS[kind], ms / 1000, steps)
            round_figures[name] = (quantile(w, 0.5), quantile(w, 0.9), quantile(w, 0.99))
        floor50, _, floor99 = round_figures["queue.Queue (ceiling)"]
        for name, (p50, p90, p99) in round_figures.items():
            f = figures[name]
            f["p50"].append(p50)
            f["p90"].append(p90)
            f["p99"].append(p99)
            f["r50"].append(p50 / floor50)
            f["r99"].append(p99 / floor99)
    rows = []
    for name, f in figures.items():
        p50, p99 = statistics.median(f["p50"]), statistics.median(f["p99"])
        floor50 = statistics.median(figures["queue.Queue (ceiling)"]["p50"])
        floor99 = statistics.median(figures["queue.Queue (ceiling)"]["p99"])
        met = p50 <= max(1.5 * floor50, 15.0) and p99 <= max(2 * floor99, 100.0)
        verdict = "" if name.startswith(("queue", "torch")) else ("met" if met else "missed")
        rows.append(
            f"| {workers} | {kind} {ms:g} ms | {name} | {spread(f['p50'])} | {spread(f['p90'])} | {spread(f['p99'])} "
            f"| {spread(f['r50'], 2)} | {spread(f['r99'], 2)} | {verdict} |"
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.step_wait", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300, help="timed steps per setting and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="2,8", help="comma-separated numbers of workers")
    parser.add_argument("--step-ms", default="2,10,20", help="comma-separated step lengths in ms")
    parser.add_argument("--loaders", default="", help="comma-separated loader names (default: all)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 30 steps, 1 repeat, 2 workers, 2 ms")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.workers, args.step_ms = 30, 1, "2", "2"
    torch.set_num_threads(1)
    names = [n for n in args.loaders.split(",") if n]
    print(f"batch {BATCH} of in-memory ints; {args.steps} timed steps after {WARMUP}; {args.repeats} repeats")
    print("median over repeats (range); ratios to the queue's figure of the same round\n")
    print("| workers | step | loader | p50 us | p90 us | p99 us | p50 / queue | p99 / queue | target |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---|")
    for workers in (int(w) for w in args.workers.split(",")):
        for kind in STEPS:
            for ms in (float(m) for m in args.step_ms.split(",")):
                for row in run_setting(workers, kind, ms, args.steps, args.repeats, names):
                    print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
