"""Experiment: where the first batch of a later epoch waits, for ThreadLoader(num_workers=2).

    python -m benchmarks.epoch_start [--epochs 200] [--profile]

Times ``iter(loader)`` and the first ``next()`` over many epochs of one loader with
persistent workers (its pool kept: the configuration of the harness's second-epoch target),
on the ``startup`` workload's dataset (256 in-memory items, batch 32), and splits the first
``next()`` with timestamps the dataset takes: from ``iter()`` returning to the first
``__getitem__`` (a pool thread wakes and pulls the batch's indices), the batch's items, and
from its last item to the batch in the caller's hands (collate, deposit, the caller wakes).
``--profile`` adds cProfile's view of ``iter()`` and the first ``next()``. See
docs/performance.md.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Sequence

from benchmarks.workloads.overhead import IndexDataset
from torch_threadloader import ThreadLoader


class StampedDataset(IndexDataset):
    """``IndexDataset`` that notes when the first and the last item of batch 0 are loaded."""

    first_item = last_item = 0.0

    def __getitem__(self, index: int) -> int:
        if index == 0:
            self.first_item = time.perf_counter()
        elif index == 31:
            self.last_item = time.perf_counter()
        return index


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.epoch_start",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    dataset = StampedDataset(256)
    loader = ThreadLoader(dataset, batch_size=32, num_workers=2, persistent_workers=True)
    for _ in loader:  # the first epoch starts the pool
        pass
    iter_s, next_s, phases = [], [], []
    profiler = cProfile.Profile() if args.profile else None
    for _ in range(args.epochs):
        if profiler is not None:
            profiler.enable()
        start = time.perf_counter()
        iterator = iter(loader)
        made = time.perf_counter()
        next(iterator)
        first = time.perf_counter()
        if profiler is not None:
            profiler.disable()
        iter_s.append(made - start)
        next_s.append(first - made)
        phases.append((dataset.first_item - made, dataset.last_item - dataset.first_item, first - dataset.last_item))
        for _ in iterator:
            pass
    loader.close()
    print(
        f"over {args.epochs} later epochs, medians: iter() {statistics.median(iter_s) * 1e6:.0f} µs, "
        f"first next() {statistics.median(next_s) * 1e6:.0f} µs"
    )
    wake, items, handover = (statistics.median(p[i] for p in phases) * 1e6 for i in range(3))
    print(
        f"first next(), split: to the first __getitem__ {wake:.0f} µs, the 32 items {items:.0f} µs, "
        f"last item to the batch in hand {handover:.0f} µs"
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
