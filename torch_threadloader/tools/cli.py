"""The command line (also the ``torch-threadloader`` script):

* ``python -m torch_threadloader info``: Python, GIL, torch, CUDA and CPU facts and the
  recommended settings;
* ``python -m torch_threadloader bench MODULE:FACTORY``: your dataset under torch's DataLoader
  and under ThreadLoader over a small grid, the verdict and the settings to use
  (:mod:`torch_threadloader.tools.tune`, ``docs/tuning.md``).

The synthetic benchmarks that compare loaders are not part of the installed package: run them
from a checkout with ``python -m benchmarks run`` (see ``docs/performance.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand."""
    from torch_threadloader.tools.tune import DEFAULT_BATCH_SIZE, DEFAULT_BATCHES, DEFAULT_SECONDS

    parser = argparse.ArgumentParser(
        prog="python -m torch_threadloader",
        description="torch-threadloader: PyTorch data loading on threads and asyncio.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    info = commands.add_parser("info", help="print Python, GIL, torch, CUDA and CPU facts and recommended settings")
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    bench = commands.add_parser(
        "bench",
        help="time your dataset under torch's DataLoader and ThreadLoader; print the verdict and the settings to use",
        description=(
            "Time MODULE:FACTORY (a function returning your dataset, or a DataLoader/ThreadLoader whose settings "
            "are reused) under torch.utils.data.DataLoader and under ThreadLoader(stats=True) over a small grid "
            "of num_workers and item_concurrency; print the rates, the ratio, report()'s verdict for the best "
            "ThreadLoader and the settings to use. Progress goes to stderr."
        ),
    )
    bench.add_argument("target", metavar="MODULE:FACTORY", help="e.g. mypkg.data:make_dataset")
    bench.add_argument(
        "--batches", type=int, default=DEFAULT_BATCHES, help=f"per configuration, at most (default {DEFAULT_BATCHES})"
    )
    bench.add_argument(
        "--seconds",
        type=float,
        default=DEFAULT_SECONDS,
        help=f"per configuration, at most (default {DEFAULT_SECONDS:g})",
    )
    bench.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"override the loader's batch size (default: the loader's, or {DEFAULT_BATCH_SIZE} for a dataset)",
    )
    bench.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V,V,...",
        help="replace one axis of the grid: torch_num_workers (empty: skip torch's DataLoader), num_workers, "
        "item_concurrency; repeatable",
    )
    bench.add_argument("--json", action="store_true", help="print one JSON object instead of the text")
    bench.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def _info(args: argparse.Namespace) -> int:
    from torch_threadloader.tools.info import collect, format_report

    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from torch_threadloader.tools.tune import (
        FactoryError,
        bench,
        default_grid,
        dumps,
        format_result,
        load_target,
        parse_grid,
    )

    if args.batches < 1:
        parser.error(f"--batches must be >= 1, got {args.batches}")
    if not args.seconds > 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")
    if args.batch_size is not None and args.batch_size < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    try:
        target = load_target(args.target, batch_size=args.batch_size)
        grid = parse_grid(args.grid, default_grid(target))
    except (FactoryError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = bench(
            target, grid=grid, batches=args.batches, seconds=args.seconds, progress=None if args.quiet else sys.stderr
        )
    finally:
        target.close()
    print(dumps(result) if args.json else format_result(result))
    return 0 if result.settings() is not None else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m torch_threadloader`` and the ``torch-threadloader`` script."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "bench":
        return _bench(args, parser)
    return _info(args)
