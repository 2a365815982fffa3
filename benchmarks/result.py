"""The one result type of every suite, its JSON file, and the table that reports it.

A suite measures some *cases* (a batch size, a dataset, a setting), each under some
*configurations* (a loader and its options), and records for each pair one or more *metrics*:
the raw ``values`` (one per round, repeat or step), with their median and spread (min, max).
:class:`Recorder` collects them for one run of one suite, stamped with the interpreter, torch,
the commit and the time, and writes them as one JSON file,
``benchmarks/results/<suite>-<timestamp>.json`` unless ``--out`` names another folder.
:func:`format_table` prints any list of results as a markdown table;
``python -m benchmarks report FILE...`` prints the tables of files already written.

The common command line of a suite (:func:`suite_parser`): ``--out DIR`` and ``--smoke`` (tiny
sizes: it shows the suite runs and writes its results, nothing about speed).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import math
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "RESULTS",
    "Recorder",
    "Result",
    "environment",
    "format_table",
    "load_results",
    "suite_parser",
]

#: Where results go unless ``--out`` says otherwise.
RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = 1


@dataclass
class Result:
    """One metric of one configuration of one case of a suite's run."""

    suite: str
    case: str
    config: str
    metric: str
    unit: str
    values: list[float]
    median: float
    #: (min, max) of ``values``
    spread: tuple[float, float]
    #: The settings the case ran with (items, batch size, workers, ...), as JSON values.
    params: dict[str, Any] = field(default_factory=dict)
    python: str = ""
    torch: str = ""
    commit: str = ""
    timestamp: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["spread"] = tuple(values["spread"])
        return cls(**values)


def _git_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if dirty else "")


@functools.cache
def environment() -> dict[str, str]:
    """The interpreter, torch's version (``""`` where torch is not installed) and the commit."""
    build = "" if getattr(sys, "_is_gil_enabled", lambda: True)() else " (free-threaded)"
    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:
        torch_version = ""
    return {"python": sys.version.split()[0] + build, "torch": torch_version, "commit": _git_commit()}


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return repr(value)


class Recorder:
    """The results of one run of ``suite``: :meth:`add` each measurement, then :meth:`finish`."""

    def __init__(self, suite: str, argv: Sequence[str] | None = None) -> None:
        self.suite = suite
        self.command = shlex.join(["python", "-m", "benchmarks", suite, *(sys.argv[1:] if argv is None else argv)])
        self.started = datetime.datetime.now(datetime.UTC)
        self.results: list[Result] = []

    def add(self, case: str, config: str, metric: str, values: Iterable[float], unit: str, **params: Any) -> Result:
        """Record ``values`` (at least one) of ``metric`` for ``config`` in ``case``."""
        floats = [float(v) for v in values]
        if not floats:
            raise ValueError(f"{self.suite} / {case} / {config} / {metric}: no values")
        env = environment()
        result = Result(
            suite=self.suite,
            case=case,
            config=config,
            metric=metric,
            unit=unit,
            values=floats,
            median=statistics.median(floats),
            spread=(min(floats), max(floats)),
            params=_json_value(params),
            python=env["python"],
            torch=env["torch"],
            commit=env["commit"],
            timestamp=self.started.isoformat(timespec="seconds"),
        )
        self.results.append(result)
        return result

    def write(self, out: Path | None = None) -> Path:
        """Write every result to ``out/<suite>-<timestamp>.json`` (default folder: :data:`RESULTS`)."""
        folder = RESULTS if out is None else out
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.suite}-{self.started.strftime('%Y%m%dT%H%M%SZ')}.json"
        self.write_file(path)
        return path

    def write_file(self, path: Path) -> None:
        """Write every result to the file ``path``."""
        document = {
            "schema": SCHEMA,
            "suite": self.suite,
            "command": self.command,
            "results": [dataclasses.asdict(r) for r in self.results],
        }
        path.write_text(json.dumps(document, indent=1, allow_nan=True) + "\n")

    def finish(self, args: argparse.Namespace) -> int:
        """Write the results to ``args.out``, print their table and where they went; 0."""
        path = self.write(args.out)
        print(format_table(self.results))
        print(f"\nWrote {path}")
        return 0


def load_results(path: Path) -> list[Result]:
    """The results of a file :meth:`Recorder.write` wrote."""
    document = json.loads(Path(path).read_text())
    return [Result.from_json(r) for r in document["results"]]


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.01 or value == 0:
        return f"{value:.3g}" if magnitude < 1 else f"{value:.2f}"
    return f"{value:.3g}"


def format_table(results: Sequence[Result]) -> str:
    """A markdown table, one row per result, under a line per suite and environment."""
    lines: list[str] = []
    heads: dict[tuple[str, str, str, str], None] = {}
    for r in results:
        heads.setdefault((r.suite, r.python, r.torch, r.commit[:12]), None)
    for suite, python, torch_version, commit in heads:
        lines.append(f"{suite}: Python {python}, torch {torch_version or '-'}, commit {commit or '-'}")
    lines += [
        "",
        "| case | configuration | metric | median | min – max | unit | n |",
        "|---|---|---|---:|---:|---|---:|",
    ]
    for r in results:
        low, high = r.spread
        lines.append(
            f"| {r.case} | {r.config} | {r.metric} | {_number(r.median)} | {_number(low)} – {_number(high)} "
            f"| {r.unit} | {len(r.values)} |"
        )
    return "\n".join(lines)


def suite_parser(suite: str, doc: str | None, *, smoke_help: str = "") -> argparse.ArgumentParser:
    """The argument parser of ``suite``: its docstring as the description, ``--out`` and ``--smoke``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks {suite}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="the folder for the JSON results (default: benchmarks/results)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=smoke_help or "tiny sizes: checks that the suite runs and writes its results, says nothing of speed",
    )
    return parser
