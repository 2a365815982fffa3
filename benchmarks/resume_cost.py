"""What a ThreadLoader checkpoint costs: ``state_dict()`` time and size during a
1,000,000-sample epoch with ``in_order=False`` and 256 items in flight, and the time a
resume takes to seek half-way into the epoch.

    python -m benchmarks.resume_cost [--batches 4000] [--repeats 3]

Two shapes of 256 items in flight: 32 batches of 8 (8 workers, ``prefetch_factor=4``) and
256 batches of 1 (64 workers). Items finish out of order (random waits up to 0.5 ms), and one
item in 500 waits 20 ms, so many positions past the oldest unfinished one are done: the worst
case for the state's list of ranges. Target: at most 1 ms and 64 KiB per state. The time is shown as the calling
thread's CPU time (the state's own cost) and as wall time, which adds the waits for the GIL
while the worker threads run (up to a switch interval, 5 ms, per wait).
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time
from typing import Any

import torch
from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader

SAMPLES = 1_000_000


class Waits(Dataset[int]):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> int:
        rng = random.Random(i)
        time.sleep(0.02 if rng.random() < 0.002 else rng.random() * 0.0005)
        return i


def size_of(state: dict[str, Any]) -> int:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.tell()


def make(batch_size: int, workers: int) -> ThreadLoader[int]:
    """The measured loader; the resumed one is built the same way."""
    return ThreadLoader(
        Waits(),
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
    times.sort()
    cpu.sort()
    return {
        "cpu_median_ms": statistics.median(cpu) * 1e3,
        "cpu_p99_ms": cpu[int(len(cpu) * 0.99)] * 1e3,
        "median_ms": statistics.median(times) * 1e3,
        "p99_ms": times[int(len(times) * 0.99)] * 1e3,
        "max_ms": times[-1] * 1e3,
        "max_kib": max(sizes) / 1024,
        "max_ranges": max(ranges),
        "seek_half_epoch_ms": seek * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=4000, help="batches delivered per run (states every 10)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        "| in flight | state_dict() CPU median | CPU p99 | wall median | wall p99 | wall max "
        "| largest state | most ranges | resume seek to half |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for batch_size, workers in ((8, 8), (1, 64)):
        runs = [measure(batch_size, workers, args.batches) for _ in range(args.repeats)]

        def spread(key: str, runs: list[dict[str, float]] = runs) -> str:
            values = [r[key] for r in runs]
            return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"

        print(
            f"| {32 * batch_size if batch_size == 8 else 256} items: {workers} workers x 4 batches of {batch_size} "
            f"| {spread('cpu_median_ms')} ms | {spread('cpu_p99_ms')} ms | {spread('median_ms')} ms | {spread('p99_ms')} ms | {spread('max_ms')} ms | {spread('max_kib')} KiB "
            f"| {max(r['max_ranges'] for r in runs):.0f} | {spread('seek_half_epoch_ms')} ms |"
        )


if __name__ == "__main__":
    main()
