"""The training step's wait: what one ``next()`` costs after a step, when loading keeps up.

    python -m benchmarks step_wait [--steps 300] [--repeats 3] [--workers 2,8] [--step-ms 2,10,20] [--loaders A,B] [--smoke]

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
each figure is recorded per repeat (median and range over repeats), with the ratio to the
queue's p50 / p99 of the same round. The target: ThreadLoader's p50 within
1.5x of the queue's (or 15 us), its p99 within 2x (or 100 us).
"""

from __future__ import annotations

import functools
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, default_collate

from benchmarks.datasets import AsyncIndexDataset, IndexDataset, StreamDataset
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import close, interleave, quantile, ratios
from torch_threadloader import ThreadLoader

BATCH = 32
WARMUP = 20
QUEUE = "queue.Queue (ceiling)"


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
        QUEUE: lambda: QueueCeiling(batches, depth=2 * workers),
        "ThreadLoader map": lambda: ThreadLoader(IndexDataset(size), **common),
        "ThreadLoader iterable": lambda: ThreadLoader(StreamDataset(size), **common),
        "ThreadLoader async": lambda: ThreadLoader(AsyncIndexDataset(size), **common),
        "ThreadLoader processes": lambda: ThreadLoader(
            IndexDataset(size), batch_size=BATCH, num_workers=1, worker_processes=workers
        ),
        "torch DataLoader": lambda: DataLoader(IndexDataset(size), **common),
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
        close(it)
        del it
        close(loader)


def run_setting(
    recorder: Recorder, workers: int, kind: str, ms: float, steps: int, repeats: int, names: Sequence[str]
) -> None:
    """Record one (workers, step kind, step length): every loader, the loaders in turn, repeated."""
    factories = loaders(workers, WARMUP + steps + 4 * workers + 2)
    if names:
        factories = {k: v for k, v in factories.items() if k in names or k == QUEUE}

    def run(make: Callable[[], Any]) -> list[float]:
        return waits(make(), STEPS[kind], ms / 1000, steps)

    runs = {name: functools.partial(run, make) for name, make in factories.items()}
    measured = interleave(runs, repeats, warmup=0, order="fixed")
    figures = {n: {f"p{q}": [quantile(w, q / 100) for w in ws] for q in (50, 90, 99)} for n, ws in measured.items()}
    case = f"{workers} workers, {kind} {ms:g} ms"
    params = {"workers": workers, "step_ms": ms, "steps": steps, "batch_size": BATCH}
    floor = figures[QUEUE]
    for name, f in figures.items():
        for quantile_name in ("p50", "p90", "p99"):
            recorder.add(case, name, f"next() wait {quantile_name}", f[quantile_name], "µs", **params)
        if name != QUEUE:
            recorder.add(case, name, "p50 / queue", ratios(f["p50"], floor["p50"]), "x", **params)
            recorder.add(case, name, "p99 / queue", ratios(f["p99"], floor["p99"]), "x", **params)


def main(argv: Sequence[str] | None = None, *, suite: str = "step_wait") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--steps", type=int, default=300, help="timed steps per setting and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="2,8", help="comma-separated numbers of workers")
    parser.add_argument("--step-ms", default="2,10,20", help="comma-separated step lengths in ms")
    parser.add_argument("--loaders", default="", help="comma-separated loader names (default: all)")
    parser.add_argument("--quick", action="store_true", help="30 steps, 1 repeat, 2 workers, 2 ms")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.workers, args.step_ms = 30, 1, "2", "2"
    if args.smoke:
        args.steps, args.repeats, args.workers, args.step_ms = 5, 1, "2", "1"
    torch.set_num_threads(1)
    names = [n for n in args.loaders.split(",") if n]
    unknown = sorted(set(names) - set(loaders(2, 1)) - {QUEUE})
    if unknown:
        parser.error(
            f"--loaders: no loader named {', '.join(map(repr, unknown))}; the names: {', '.join(loaders(2, 1))}"
        )
    recorder = Recorder(suite, argv)
    for workers in (int(w) for w in args.workers.split(",")):
        for kind in STEPS:
            for ms in (float(m) for m in args.step_ms.split(",")):
                run_setting(recorder, workers, kind, ms, args.steps, args.repeats, names)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
