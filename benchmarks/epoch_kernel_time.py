"""Experiment: kernel time and page faults per epoch, per configuration, in the harness's run.

    python -m benchmarks.epoch_kernel_time [--workload local_files] [--scale full]

Runs workloads exactly as the harness does (``run_suite``; its results are not written) and
reads this process's ``getrusage`` around each timed epoch: cores busy (CPU over wall time,
this process's threads only, so worker processes' time is not in it: the ``torch nw=2``
rows mean little), the part of it in the kernel, and minor page faults per item. Prints the
median over the timed epochs per configuration. Environment variables reach the allocator
and OpenMP as usual, e.g. ``OMP_WAIT_POLICY=PASSIVE`` or
``GLIBC_TUNABLES=glibc.malloc.trim_threshold=...``. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import benchmarks.harness as harness
from benchmarks.suite import run_suite


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.epoch_kernel_time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workload", action="append", default=[], metavar="NAME")
    parser.add_argument("--scale", default="full", choices=sorted(harness.SCALES))
    args = parser.parse_args(argv)

    labels: dict[int, str] = {}
    rows: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    make_loader, time_epoch = harness.make_loader, harness.time_epoch

    def labelled_make_loader(case: Any, config: Any) -> Iterable[Any]:
        loader = make_loader(case, config)
        labels[id(loader)] = f"{case.name}: {config.label}"
        return loader

    def measured_time_epoch(loader: Iterable[Any], count: Callable[[Any], int]) -> tuple[float, int]:
        before = resource.getrusage(resource.RUSAGE_SELF)
        elapsed, seen = time_epoch(loader, count)
        after = resource.getrusage(resource.RUSAGE_SELF)
        user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
        faults = (after.ru_minflt - before.ru_minflt) / max(seen, 1)
        rows[labels.get(id(loader), "?")].append((elapsed, (user + system) / elapsed, system / elapsed, faults))
        return elapsed, seen

    harness.make_loader = labelled_make_loader  # type: ignore[assignment]
    harness.time_epoch = measured_time_epoch
    try:
        run_suite(args.workload or ["local_files"], harness.SCALES[args.scale], command="epoch_kernel_time")
    finally:
        harness.make_loader, harness.time_epoch = make_loader, time_epoch

    print("| configuration | median epoch | cores busy (this process) | of which kernel | minor faults per item |")
    print("|---|---:|---:|---:|---:|")
    for label, values in rows.items():
        # every epoch, the warm-up included: the harness's own medians are in its results
        wall, busy, kernel, faults = (statistics.median(v[i] for v in values) for i in range(4))
        print(f"| {label} | {wall * 1e3:.0f} ms | {busy:.2f} | {kernel:.2f} | {faults:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
