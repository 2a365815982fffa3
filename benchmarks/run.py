"""``python -m benchmarks run [--quick | --smoke] [--workload NAME] [--out DIR] [--list]``: the
benchmark harness, from the repository root, writing to ``benchmarks/results/`` unless ``--out``
says otherwise.

Runs the workloads through ThreadLoader and ``torch.utils.data.DataLoader`` (num_workers 0, N,
N persistent), interleaved, writes ``results.json``, ``results.md`` and ``chart.png`` (the
published run) and the suites' results file, ``run-<timestamp>.json``, and prints the markdown
table. ``docs/performance.md`` says what it measures and how.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._memory_probe import record as record_memory
from benchmarks.result import RESULTS, Recorder

__all__ = ["RESULTS", "build_parser", "main", "record"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks run",
        description="Benchmarks ThreadLoader against torch.utils.data.DataLoader on this machine, "
        "interleaved, and writes results.json, results.md and chart.png. Prints the markdown table.",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sizes and 2 timed epochs")
    size.add_argument(
        "--smoke", action="store_true", help="tiny sizes, one epoch: checks that it runs, says nothing of speed"
    )
    parser.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this workload (repeat, or separate with commas); default: all",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results, the published run)"
    )
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    return parser


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


_MODE_METRICS = {
    "epoch": (("seconds", "epoch"),),
    "startup": (("seconds", "first batch"), ("second_epoch", "first batch, second epoch")),
}


def record(results: dict[str, Any], recorder: Recorder) -> None:
    """The harness's results as the suites' results: per configuration its epoch (or first
    batch) times, CPU per item and page faults per item, or its memory; per target its value."""
    for workload in results["workloads"]:
        for case in workload["cases"]:
            name = f"{workload['name']}: {case['name']}"
            params = {"items": case["items"], "batch_size": case["batch_size"], "scale": results["scale"]["name"]}
            for config in case["configs"]:
                label = config["label"]
                if case["mode"] == "memory":
                    record_memory(recorder, name, label, config["memory"], **params)
                    continue
                for key, metric in _MODE_METRICS[case["mode"]]:
                    recorder.add(name, label, metric, config[key], "s", **params)
                if case["mode"] == "epoch":
                    cpu = [1e6 * c / case["items"] for c in config["cpu_seconds"]]
                    recorder.add(name, label, "CPU per item (process tree)", cpu, "µs", **params)
                    faults = [f / case["items"] for f in config["minor_faults"]]
                    recorder.add(name, label, "minor faults per item", faults, "", **params)
        for target in workload["targets"]:
            recorder.add(
                f"{workload['name']}: {target['case']}",
                target["config"],
                f"target: {target['label']} ({target['metric']})",
                [target["measured"]],
                "",
                threshold=target["threshold"],
                met=target["met"],
                baseline=target["baseline"],
            )


def main(argv: Sequence[str] | None = None, *, command: str | None = None, suite: str = "run") -> int:
    """Runs the harness with command-line arguments ``argv`` (default: ``sys.argv[1:]``).
    ``command``: how the run is recorded in the results (default: the ``python -m`` form)."""
    from benchmarks.harness import SCALES
    from benchmarks.report import format_markdown, write_outputs
    from benchmarks.suite import run_suite
    from benchmarks.workloads import NAMES, load

    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(args_list)
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
    command = command or (f"python -m benchmarks {suite} " + shlex.join(args_list)).strip()
    with _TqdmProgress() as progress:
        results = run_suite(names, scale, command=command, progress=progress)
    paths = write_outputs(results, args.out)
    recorder = Recorder(suite, args_list)
    record(results, recorder)
    paths["results"] = recorder.write(args.out)
    print(format_markdown(results, heading_level=2))
    written = ", ".join(str(p) for p in paths.values())
    print(f"Wrote {written}" + ("" if "chart" in paths else " (no chart: matplotlib is not installed)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
