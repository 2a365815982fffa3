"""What a ThreadLoader checkpoint costs: ``state_dict()`` time and size during a
1,000,000-sample epoch with ``in_order=False`` and 256 items in flight, and the time a
resume takes to seek half-way into the epoch.

    python -m benchmarks resume_cost [--batches 4000] [--repeats 3] [--smoke]

Two shapes of 256 items in flight: 32 batches of 8 (8 workers, ``prefetch_factor=4``) and
256 batches of 1 (64 workers). Items finish out of order (random waits up to 0.5 ms), and one
item in 500 waits 20 ms, so many positions past the oldest unfinished one are done: the worst
case for the state's list of ranges. Target: at most 1 ms and 64 KiB per state. The time is shown as the calling
thread's CPU time (the state's own cost) and as wall time, which adds the waits for the GIL
while the worker threads run (up to a switch interval, 5 ms, per wait).
"""

from __future__ import annotations

import io
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from benchmarks.datasets import RandomWaits
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import quantile

SAMPLES = 1_000_000


def size_of(state: dict[str, Any]) -> int:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.tell()


def make(batch_size: int, workers: int) -> Any:
    """The measured loader; the resumed one is built the same way."""
    from torch_threadloader import ThreadLoader

    return ThreadLoader(
        RandomWaits(SAMPLES),
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        prefetch_factor=4,
        in_order=False,
        generator=torch.Generator().manual_seed(0),
    )


def measure(batch_size: int, workers: int, batches: int) -> dict[str, float]:
    loader = make(batch_size, workers)
    times: list[float] = []
    cpu: list[float] = []
    sizes: list[int] = []
    ranges: list[int] = []
    it = iter(loader)
    for n in range(batches):
        next(it)
        if n % 10 == 9:
            start, start_cpu = time.perf_counter(), time.thread_time()
            state = loader.state_dict()
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - start_cpu)
            sizes.append(size_of(state))
            ranges.append(len(state["done"]))
    it.close()
    # Seek: resume half-way through the epoch (the sampler replays its order and passes over
    # the delivered positions without loading them).
    state["frontier"] = len(loader) // 2
    resumed = make(batch_size, workers)
    start = time.perf_counter()
    resumed.load_state_dict(state)
    it = iter(resumed)
    next(it)
    seek = time.perf_counter() - start
    it.close()
    loader.close()
    resumed.close()
    return {
        "state_dict() CPU median": statistics.median(cpu) * 1e3,
        "state_dict() CPU p99": quantile(cpu, 0.99) * 1e3,
        "state_dict() wall median": statistics.median(times) * 1e3,
        "state_dict() wall p99": quantile(times, 0.99) * 1e3,
        "state_dict() wall max": max(times) * 1e3,
        "largest state": max(sizes) / 1024,
        "most ranges": max(ranges),
        "resume seek to half the epoch": seek * 1e3,
    }


UNITS = {"largest state": "KiB", "most ranges": ""}


def main(argv: Sequence[str] | None = None, *, suite: str = "resume_cost") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--batches", type=int, default=4000, help="batches delivered per run (states every 10)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.smoke:
        args.batches, args.repeats = 20, 1
    recorder = Recorder(suite, argv)
    for batch_size, workers in ((8, 8), (1, 64)):
        runs = [measure(batch_size, workers, args.batches) for _ in range(args.repeats)]
        case = f"256 items in flight: {workers} workers x 4 batches of {batch_size}"
        for key in runs[0]:
            values = [r[key] for r in runs]
            recorder.add(case, "ThreadLoader in_order=False", key, values, UNITS.get(key, "ms"), batches=args.batches)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
