"""Experiment: where the first batch of a later epoch waits, for ThreadLoader(num_workers=2).

    python -m benchmarks.epoch_start [--epochs 200] [--profile]

Times ``iter(loader)`` and the first ``next()`` over many epochs of one loader (its pool
kept), on the ``startup`` workload's dataset (256 in-memory items, batch 32); ``--profile``
adds cProfile's view of those two calls. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Sequence

from torch_threadloader import ThreadLoader
from torch_threadloader.bench.workloads.overhead import IndexDataset


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.epoch_start", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    loader = ThreadLoader(IndexDataset(256), batch_size=32, num_workers=2)
    for _ in loader:  # the first epoch starts the pool
        pass
    iter_s, next_s = [], []
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
        for _ in iterator:
            pass
    loader.close()
    print(f"over {args.epochs} later epochs, medians: iter() {statistics.median(iter_s) * 1e6:.0f} µs, "
          f"first next() {statistics.median(next_s) * 1e6:.0f} µs")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
