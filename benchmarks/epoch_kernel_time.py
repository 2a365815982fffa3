"""Kernel time and page faults per epoch, per configuration, in the harness's run.

    python -m benchmarks epoch_kernel_time [--workload local_files] [--scale full] [--smoke]

Runs workloads exactly as the harness does (``run_suite``; its results are not written) and
reads this process's ``getrusage`` around each timed epoch: cores busy (CPU over wall time,
this process's threads only, so worker processes' time is not in it: the ``torch nw=2``
rows mean little), the part of it in the kernel, and minor page faults per item, for every
epoch (the warm-up included: the harness's own figures are in its results). Environment variables reach the allocator
and OpenMP as usual, e.g. ``OMP_WAIT_POLICY=PASSIVE`` or
``GLIBC_TUNABLES=glibc.malloc.trim_threshold=...``.
"""

from __future__ import annotations

import resource
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import benchmarks.harness as harness
from benchmarks.result import Recorder, suite_parser
from benchmarks.suite import run_suite


def main(argv: Sequence[str] | None = None, *, suite: str = "epoch_kernel_time") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--workload", action="append", default=[], metavar="NAME")
    parser.add_argument("--scale", default="full", choices=sorted(harness.SCALES))
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale = "smoke"

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
        rows[labels.get(id(loader), "?")].append((elapsed * 1e3, (user + system) / elapsed, system / elapsed, faults))
        return elapsed, seen

    harness.make_loader = labelled_make_loader  # type: ignore[assignment]
    harness.time_epoch = measured_time_epoch
    try:
        run_suite(args.workload or ["local_files"], harness.SCALES[args.scale], command="epoch_kernel_time")
    finally:
        harness.make_loader, harness.time_epoch = make_loader, time_epoch

    recorder = Recorder(suite, argv)
    for label, values in rows.items():
        case, _, config = label.partition(": ")
        for i, (metric, unit) in enumerate(
            (("epoch", "ms"), ("cores busy (this process)", ""), ("of which kernel", ""), ("minor faults per item", ""))
        ):
            recorder.add(case, config, metric, [v[i] for v in values], unit, scale=args.scale)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
