"""The command line: ``python -m torch_threadloader info`` (also the ``torch-threadloader`` script).

The benchmarks are not part of the installed package: run them from a checkout with
``python -m benchmarks.run`` (see ``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m torch_threadloader",
        description="torch-threadloader: PyTorch data loading on threads and asyncio.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    info = commands.add_parser("info", help="print Python, GIL, torch, CUDA and CPU facts and recommended settings")
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def _info(args: argparse.Namespace) -> int:
    from torch_threadloader.info import collect, format_report

    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m torch_threadloader`` and the ``torch-threadloader`` script."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return _info(args)
