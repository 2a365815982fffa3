"""Experiment: the hand-over of tiny batches in dataloader-rs, the Rust-core thread loader.

    python -m benchmarks.handoff_rs [--epochs 6]     # any CPython >= 3.13 with dataloader-rs

The same measurement as ``benchmarks.handoff`` (``__getitem__`` returns the index, so an epoch
is nothing but hand-overs; batch 1 and 32, 2 workers; wall and CPU time per batch, medians over
the epochs after the first), for ``dataloader_rs.PyDataloader`` with list batches, beside
ThreadLoader's list-batch row of ``benchmarks.handoff``. dataloader-rs needs CPython 3.13 or
newer and no torch, so it runs in its own interpreter; see docs/performance.md.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from dataloader_rs import PyDataloader, PyDataset

    class IndexDataset(PyDataset):  # type: ignore[misc]
        def __init__(self, n: int) -> None:
            super().__init__()
            self.n = n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, index: int) -> int:
            return index

    parser = argparse.ArgumentParser(prog="python -m benchmarks.handoff_rs", description=__doc__)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args(argv)
    print(f"dataloader-rs on CPython {sys.version.split()[0]}, 2 workers, list batches")
    print("| batch | wall per batch | CPU per batch | voluntary switches |")
    print("|---:|---:|---:|---:|")
    for batch_size, items in ((1, 4_096), (32, 65_536)):
        loader = PyDataloader(IndexDataset(items), batch_size=batch_size, num_workers=2)
        rows = []
        for epoch in range(args.epochs):
            before = resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter()
            batches = sum(1 for _ in loader)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
            if epoch:
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                rows.append((wall / batches, cpu / batches, (after.ru_nvcsw - before.ru_nvcsw) / batches))
        wall, cpu, switches = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"| {batch_size} | {wall * 1e6:.1f} µs | {cpu * 1e6:.1f} µs | {switches:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
