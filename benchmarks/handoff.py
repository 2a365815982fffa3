"""Experiment: what handing a tiny batch from a worker thread to the consumer costs.

    python -m benchmarks.handoff [--epochs 6]

``ThreadLoader(num_workers=2)`` over the ``overhead`` dataset (``__getitem__`` returns the
index, so an epoch is nothing but hand-overs), batch 1 and 32, batches as tensors and as plain
lists (what ``benchmarks.handoff_rs`` measures for dataloader-rs): per batch, the wall time, the
process's CPU time (of which in the kernel) and its voluntary and involuntary context
switches (``getrusage``), medians over the epochs after the first. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Sequence

from benchmarks.workloads.overhead import IndexDataset
from torch_threadloader import ThreadLoader


def _as_list(batch: list[int]) -> list[int]:
    return batch


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.handoff", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args(argv)
    print("| batches | batch | wall per batch | CPU per batch | of which kernel | voluntary switches | involuntary |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, collate in (("tensors (default_collate)", None), ("lists (as dataloader-rs)", _as_list)):
        for batch_size, items in ((1, 4_096), (32, 65_536)):
            rows = []
            with ThreadLoader(
                IndexDataset(items), batch_size=batch_size, num_workers=2, collate_fn=collate, persistent_workers=True
            ) as loader:
                for epoch in range(args.epochs):
                    before = resource.getrusage(resource.RUSAGE_SELF)
                    start = time.perf_counter()
                    batches = sum(1 for _ in loader)
                    wall = time.perf_counter() - start
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    if epoch:  # the first starts the pool
                        rows.append(
                            (
                                wall / batches,
                                (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / batches,
                                (after.ru_stime - before.ru_stime) / batches,
                                (after.ru_nvcsw - before.ru_nvcsw) / batches,
                                (after.ru_nivcsw - before.ru_nivcsw) / batches,
                            )
                        )
            wall, cpu, kernel, voluntary, involuntary = (statistics.median(r[i] for r in rows) for i in range(5))
            print(
                f"| {label} | {batch_size} | {wall * 1e6:.1f} µs | {cpu * 1e6:.1f} µs | {kernel * 1e6:.1f} µs | "
                f"{voluntary:.2f} | {involuntary:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
