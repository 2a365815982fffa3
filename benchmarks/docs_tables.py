"""The published run's tables in a docs page: ``python -m benchmarks docs PAGE``.

A page marks where a table goes with a pair of comments::

    <!-- results: overhead -->
    (the table, rewritten from the results)
    <!-- /results -->

``run`` is a paragraph naming the run (commit, machine, what it gave), ``targets`` the table
of every target, a workload's name its table (one column per case of
its epochs; its startup and memory cases in a table each). :func:`fill` rewrites every marked
block from a results dict (``benchmarks/results/results.json``, what ``python -m benchmarks run``
writes); ``--check`` only says whether the page is already the run's (exit 1 when not), which
is what the test suite runs, so a rerun that changes a figure fails until the page is updated.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import _machine_line, _ratio, _time, format_target_needed, format_target_value

__all__ = ["RESULTS", "fill", "main", "tables"]

#: The published run.
RESULTS = Path(__file__).resolve().parent / "results" / "results.json"

_BLOCK = re.compile(r"(<!-- results: ([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)


def _target_name(target: dict[str, Any]) -> str:
    """The target's label, and its configuration where the label does not already say it."""
    said = set(re.findall(r"[\w=.-]+", target["label"].replace("num_workers=", "nw=")))
    config = target["config"]
    if set(re.findall(r"[\w=.-]+", config)) - {"ThreadLoader"} <= said:
        return str(target["label"])
    return f"{target['label']}: {config.removeprefix('ThreadLoader ')}"


def _targets(results: dict[str, Any]) -> list[str]:
    rows = ["| target (ThreadLoader's configuration) | needed | measured | |", "|---|---:|---:|---|"]
    for workload in results["workloads"]:
        for t in workload["targets"]:
            rows.append(
                f"| {_target_name(t)} | {format_target_needed(t)} | "
                f"{format_target_value(t['metric'], t['measured'])} | {'met' if t['met'] else '**missed**'} |"
            )
    return rows


def _span(stats: dict[str, float]) -> str:
    """``median (min – max)``, the unit written once where the three share it."""
    median, low, high = (_time(stats[k]) for k in ("median", "min", "max"))
    unit = median.rpartition(" ")[2]
    if low.endswith(" " + unit) and high.endswith(" " + unit):
        low, high = low.rpartition(" ")[0], high.rpartition(" ")[0]
    return f"{median} ({low} – {high})"


def _epoch_cell(config: dict[str, Any]) -> str:
    ratio = _ratio(config["vs_torch_best"])
    if config["runner"] == "threadloader":
        ratio = f"**{ratio}**"
    return f"{_span(config['seconds_stats'])}, {ratio}"


def _epoch_table(cases: list[dict[str, Any]]) -> list[str]:
    """Configurations down, cases across: median epoch (min – max), and the ratio to the case's
    best torch configuration (marked)."""
    labels = list(dict.fromkeys(c["label"] for case in cases for c in case["configs"]))
    cells = {(case["name"], c["label"]): _epoch_cell(c) for case in cases for c in case["configs"]}
    best = {(case["name"], case["torch_best"].get("seconds_label")) for case in cases}
    header = " | ".join(f"{case['name']} ({case['items']:,} items, batch {case['batch_size']})" for case in cases)
    rows = [f"| configuration | {header} |", "|---|" + "---:|" * len(cases)]
    for label in labels:
        row = [
            cells.get((case["name"], label), "") + (" (torch's best)" if (case["name"], label) in best else "")
            for case in cases
        ]
        rows.append(f"| {label} | " + " | ".join(row) + " |")
    return rows


def _startup_table(case: dict[str, Any]) -> list[str]:
    rows = ["| configuration | fresh loader | second epoch |", "|---|---:|---:|"]
    for c in case["configs"]:
        fresh, second = c["seconds_stats"], c["second_epoch_stats"]
        rows.append(f"| {c['label']} | {_span(fresh)} | {_span(second)} |")
    return rows


def _memory_table(cases: list[dict[str, Any]]) -> list[str]:
    """Peak of the process tree above the process holding only the dataset, per case."""
    header = " | ".join(f"above dataset, {case['name']}" for case in cases)
    rows = [f"| configuration | {header} | peak RSS sum of the tree |", "|---|" + "---:|" * (len(cases) + 1)]
    for i, c in enumerate(cases[0]["configs"]):
        above = " | ".join(f"{case['configs'][i]['memory']['above_dataset_mib']:.1f} MiB" for case in cases)
        rows.append(f"| {c['label']} | {above} | {c['memory']['peak_tree_rss_mib']:,.0f} MiB |")
    return rows


def _workload(workload: dict[str, Any]) -> list[str]:
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for case in workload["cases"]:
        by_mode.setdefault(case["mode"], []).append(case)
    parts: list[list[str]] = []
    if "epoch" in by_mode:
        parts.append(_epoch_table(by_mode["epoch"]))
    parts += [_startup_table(case) for case in by_mode.get("startup", [])]
    if "memory" in by_mode:
        parts.append(_memory_table(by_mode["memory"]))
    return [line for i, part in enumerate(parts) for line in ([""] if i else []) + part]


def _run(results: dict[str, Any]) -> str:
    """The run's commit, date, machine, and what the machine gave while it ran."""
    machine, workloads = results["machine"], results["workloads"]
    cpus = [c for w in workloads for c in w["effective_cpus"]]
    bandwidth = [b for w in workloads for b in w.get("memory_scaling", [])]
    met = sum(t["met"] for w in workloads for t in w["targets"])
    count = sum(len(w["targets"]) for w in workloads)
    commit = results.get("commit") or "?"
    dirty = " with changes not committed" if commit.endswith("+dirty") else ""
    return (
        f"`{results['command']}` at commit `{commit[:7]}`{dirty}, {results['started'][:10]}: "
        f"{_machine_line(machine)} During the run the machine gave {min(cpus):.1f} – {max(cpus):.1f} CPUs of "
        f"{machine['usable_cpus']}, and {machine['usable_cpus']} threads copying memory got {min(bandwidth):.1f}x – "
        f"{max(bandwidth):.1f}x the bandwidth of one. {met} of {count} targets met."
    )


def tables(results: dict[str, Any]) -> dict[str, str]:
    """Each block's markdown by name: ``run``, ``targets``, and each workload's."""
    out = {"run": _run(results), "targets": "\n".join(_targets(results))}
    out.update({w["name"]: "\n".join(_workload(w)) for w in results["workloads"]})
    return out


def fill(text: str, results: dict[str, Any]) -> str:
    """``text`` with every marked block rewritten from ``results``; a block naming no table of
    the results raises ``KeyError`` naming it."""
    made = tables(results)

    def block(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in made:
            raise KeyError(f"<!-- results: {name} -->: no such table in the results (they have {sorted(made)})")
        return f"{match.group(1)}{made[name]}\n{match.group(4)}"

    return _BLOCK.sub(block, text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks docs", description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", type=Path, help="the markdown pages to rewrite")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"the run (default {RESULTS})")
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a page is not the run's")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    stale = []
    for page in args.pages:
        text = page.read_text()
        new = fill(text, results)
        if new != text:
            stale.append(page)
            if not args.check:
                page.write_text(new)
    verb = "differ from" if args.check else "rewritten from"
    for page in stale:
        print(f"{page}: {verb} {args.results}", file=sys.stderr if args.check else sys.stdout)
    return 1 if stale and args.check else 0
