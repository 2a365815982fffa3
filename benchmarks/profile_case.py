"""Runs one configuration of one benchmark case, epoch after epoch, for a profiler.

    python -m benchmarks profile_case overhead bs=1 "ThreadLoader nw=0" --epochs 300
    py-spy record -f raw -o /tmp/p.txt -- python -m benchmarks profile_case overhead bs=1 "torch nw=0"
    python -m benchmarks profile_case overhead bs=1 "ThreadLoader nw=0" --pyinstrument /tmp/p.txt

It records the epoch times (``--smoke``: the harness's smoke scale, 2 epochs). ``--pyinstrument FILE`` profiles the calling thread in
process and writes pyinstrument's text report; py-spy (from outside) sees every thread.
Profiles go outside the repository (``/tmp`` above, or ``$TMPDIR/torch-threadloader-profiles``):
the repository keeps only the published run.
Neither profiler is a dependency of the project: ``pip install py-spy pyinstrument``.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import SCALES, close_loader, make_loader, time_epoch
from benchmarks.result import Recorder, suite_parser
from benchmarks.workloads import NAMES, load


def main(argv: Sequence[str] | None = None, *, suite: str = "profile_case") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("workload", choices=NAMES)
    parser.add_argument("case", help="case name, e.g. bs=1")
    parser.add_argument("config", help='configuration label, e.g. "ThreadLoader nw=0"')
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--pyinstrument", type=Path, metavar="FILE", help="write a pyinstrument text report")
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.epochs = "smoke", 2
    workload = load(args.workload)
    with (
        tempfile.TemporaryDirectory(prefix="threadloader-profile-") as tmp,
        workload.cases(SCALES[args.scale], Path(tmp)) as cases,
    ):
        case = next((c for c in cases if c.name == args.case), None)
        if case is None:
            parser.error(f"no case {args.case!r}; {args.workload} has {[c.name for c in cases]}")
        config = next((c for c in case.configs if c.label == args.config), None)
        if config is None:
            parser.error(f"no configuration {args.config!r}; {case.name} has {[c.label for c in case.configs]}")
        loader = make_loader(case, config)
        time_epoch(loader, case.count)  # warm-up
        profiler = None
        if args.pyinstrument is not None:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0005)
            profiler.start()
        times = [time_epoch(loader, case.count)[0] for _ in range(args.epochs)]
        if profiler is not None:
            profiler.stop()
            args.pyinstrument.write_text(profiler.output_text(unicode=True, show_all=False))
        close_loader(loader)
    recorder = Recorder(suite, argv)
    params = {"items": case.items, "scale": args.scale}
    recorder.add(f"{args.workload} {args.case}", args.config, "epoch", [t * 1e3 for t in times], "ms", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
