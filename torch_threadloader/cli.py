"""The command line: ``python -m torch_threadloader bench`` and ``python -m torch_threadloader info``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m torch_threadloader",
        description="torch-threadloader: PyTorch data loading on threads and asyncio.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    bench = commands.add_parser(
        "bench",
        help="benchmark ThreadLoader against torch's DataLoader on this machine",
        description="Runs the benchmark workloads through ThreadLoader and torch.utils.data.DataLoader "
        "(num_workers 0, N, N persistent), interleaved, and writes results.json, results.md and "
        "chart.png. Prints the markdown table.",
    )
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sizes and 2 timed epochs: about a minute")
    size.add_argument(
        "--smoke", action="store_true", help="tiny sizes, one epoch: checks that it runs, says nothing of speed"
    )
    bench.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this workload (repeat, or separate with commas); default: all",
    )
    bench.add_argument("--out", type=Path, default=Path("bench-out"), help="output folder (default: bench-out)")
    bench.add_argument("--list", action="store_true", help="list the workloads and exit")

    info = commands.add_parser("info", help="print Python, GIL, torch, CUDA and CPU facts and recommended settings")
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def _bench(args: argparse.Namespace, command: str) -> int:
    from torch_threadloader.bench.harness import SCALES
    from torch_threadloader.bench.report import format_markdown, write_outputs
    from torch_threadloader.bench.suite import run_suite
    from torch_threadloader.bench.workloads import NAMES, load

    if args.list:
        for name in NAMES:
            print(f"{name:<14} {load(name).description}")
        return 0
    names = [n.strip() for value in args.workload for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        print(f"error: unknown workload {', '.join(unknown)}; choose from: {', '.join(NAMES)}", file=sys.stderr)
        return 2
    scale = SCALES["quick" if args.quick else "smoke" if args.smoke else "full"]
    with _TqdmProgress() as progress:
        results = run_suite(names, scale, command=command, progress=progress)
    paths = write_outputs(results, args.out)
    print(format_markdown(results, heading_level=2))
    written = ", ".join(str(p) for p in paths.values())
    print(f"Wrote {written}" + ("" if "chart" in paths else " (no chart: matplotlib is not installed)"))
    return 0


class _TqdmProgress:
    """A tqdm bar over the run's steps; the total grows as each workload announces its steps."""

    def __enter__(self) -> _TqdmProgress:
        from tqdm import tqdm

        class _Bar(tqdm):  # type: ignore[type-arg]
            monitor_interval = 0  # no monitor thread

        self.bar = _Bar(total=0, unit="epoch", file=sys.stderr, dynamic_ncols=True, leave=False)
        return self

    def stage(self, name: str, steps: int) -> None:
        self.bar.set_description(name)
        self.bar.total += steps
        self.bar.refresh()

    def step(self, n: int) -> None:
        self.bar.update(n)

    def __exit__(self, *exc: Any) -> None:
        self.bar.close()


def _info(args: argparse.Namespace) -> int:
    from torch_threadloader.info import collect, format_report

    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def main(argv: Sequence[str] | None = None, *, command: str | None = None) -> int:
    """Entry point of ``python -m torch_threadloader`` and the ``torch-threadloader`` script.
    ``command``: how the run is recorded in the results (default: the ``python -m`` form)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(args_list)
    if args.command == "bench":
        return _bench(args, command or "python -m torch_threadloader " + shlex.join(args_list))
    return _info(args)
