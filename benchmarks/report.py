"""Turns measurements into the three outputs: JSON (everything), a markdown table with ratios,
and a PNG chart."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import CaseResult, ConfigResult, WorkloadResult
from benchmarks.result import environment

__all__ = [
    "format_markdown",
    "format_target_needed",
    "format_target_value",
    "result_to_json",
    "write_chart",
    "write_outputs",
]


# -- JSON -------------------------------------------------------------------------------------


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _same_workers_best(case: CaseResult, config: ConfigResult, which: str) -> float | None:
    """The best median of torch's configurations with ``config``'s ``num_workers``."""
    if config.runner == "plain":
        return None
    workers = config.options.get("num_workers", 0)
    medians = [
        c.median(which)  # type: ignore[arg-type]
        for c in case.configs.values()
        if c.runner == "torch" and c.options.get("num_workers", 0) == workers
    ]
    return min(medians) if medians else None


def _config_json(case: CaseResult, config: ConfigResult, torch_best: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {"label": config.label, "runner": config.runner, "options": config.options}
    if case.mode == "memory":
        out["memory"] = config.memory
        return out
    out["seconds"] = config.seconds
    out["seconds_stats"] = _stats(config.seconds)
    whiches = ("seconds",) if case.mode == "epoch" else ("seconds", "second_epoch")
    if case.mode == "startup":
        out["second_epoch"] = config.second_epoch
        out["second_epoch_stats"] = _stats(config.second_epoch)
    for which in whiches:
        prefix = "" if which == "seconds" else "second_epoch_"
        median = config.median(which)  # type: ignore[arg-type]
        same = _same_workers_best(case, config, which)
        out[f"{prefix}vs_torch_best"] = torch_best[which] / median if which in torch_best and median else None
        out[f"{prefix}vs_torch_same_workers"] = same / median if same is not None and median else None
    if case.mode == "epoch":
        median = out["seconds_stats"]["median"]
        out["items_per_s"] = case.items / median if median else None
        out["cpu_seconds"] = config.cpu_seconds
        wall, cpu = sum(config.seconds), sum(config.cpu_seconds)
        # Over all timed epochs: CPU time of the process tree per item, and per second of wall time.
        out["cpu_us_per_item"] = 1e6 * cpu / (case.items * len(config.seconds)) if config.cpu_seconds else None
        out["cores_busy"] = cpu / wall if config.cpu_seconds and wall else None
        out["minor_faults"] = config.minor_faults
        out["minor_faults_per_item"] = (
            statistics.median(config.minor_faults) / case.items if config.minor_faults else None
        )
    return out


def _torch_best(case: CaseResult) -> dict[str, Any]:
    best: dict[str, Any] = {}
    labels = case.torch_labels()
    if case.mode == "memory" or not labels:
        return best
    for which in ("seconds", "second_epoch") if case.mode == "startup" else ("seconds",):
        medians = {label: case.configs[label].median(which) for label in labels}  # type: ignore[arg-type]
        label = min(medians, key=lambda k: medians[k])
        best[which] = medians[label]
        best[f"{which}_label"] = label
    return best


def result_to_json(
    workloads: Sequence[WorkloadResult], *, machine: dict[str, Any], scale: dict[str, Any], command: str, started: str
) -> dict[str, Any]:
    """Everything measured, with the machine and the command, as one JSON-ready dict."""
    out: dict[str, Any] = {
        "schema": 1,
        "started": started,
        "command": command,
        "commit": environment()["commit"],  # "+dirty": run with uncommitted changes
        "scale": scale,
        "machine": machine,
        "workloads": [],
    }
    for workload in workloads:
        cases = []
        for case in workload.cases:
            best = _torch_best(case)
            cases.append(
                {
                    "name": case.name,
                    "mode": case.mode,
                    "items": case.items,
                    "batch_size": case.batch_size,
                    "notes": case.notes,
                    "extra": case.extra,
                    "torch_best": {k: v for k, v in best.items() if k.endswith("_label")},
                    "configs": [_config_json(case, c, best) for c in case.configs.values()],
                }
            )
        out["workloads"].append(
            {
                "name": workload.name,
                "description": workload.description,
                "seconds": workload.seconds,
                "effective_cpus": list(workload.effective_cpus),
                "memory_scaling": list(workload.memory_scaling),
                "processes_note": workload.processes_note,
                "targets": workload.targets,
                "cases": cases,
            }
        )
    return out


# -- markdown ---------------------------------------------------------------------------------


def _time(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-5:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s"


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _float(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def format_target_value(metric: str, value: float) -> str:
    if metric == "ceiling_fraction":
        return f"{value:.0%}"
    if metric == "mib_above_dataset":
        return f"{value:.1f} MiB"
    return _ratio(value)


def format_target_needed(target: dict[str, Any]) -> str:
    sign = ">=" if target["higher_is_better"] else "<"
    return f"{sign} {format_target_value(target['metric'], target['threshold'])}"


def _machine_line(machine: dict[str, Any]) -> str:
    gil = "GIL enabled" if machine["gil_enabled"] else "GIL disabled"
    cuda = "CUDA available" if machine["cuda_available"] else "no CUDA"
    memory = f"{machine['memory_gib']:.0f} GiB RAM, " if machine.get("memory_gib") else ""
    return (
        f"{machine['cpu_model']}, {machine['usable_cpus']} usable CPUs, {memory}{machine['platform']}; "
        f"Python {machine['python']} ({gil}), torch {machine['torch']}, torchvision {machine['torchvision']}, "
        f"{cuda}; torch intra-op threads {machine['torch_intraop_threads']}."
    )


def _faults(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _epoch_table(case: dict[str, Any]) -> list[str]:
    rows = [
        "| configuration | median epoch | min – max | items/s | vs torch's best | vs torch, same num_workers "
        "| CPU per item | cores busy | page faults per item |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    best_label = case["torch_best"].get("seconds_label")
    for config in case["configs"]:
        stats = config["seconds_stats"]
        ratio = _ratio(config["vs_torch_best"])
        if config["label"] == best_label:
            ratio += " (torch's best)"
        elif config["runner"] == "threadloader":
            ratio = f"**{ratio}**"
        same = _ratio(config["vs_torch_same_workers"]) if config["runner"] == "threadloader" else ""
        rate = config["items_per_s"]
        rows.append(
            f"| {config['label']} | {_time(stats['median'])} | {_time(stats['min'])} – {_time(stats['max'])} | "
            f"{rate:,.0f} | {ratio} | {same} | {_time(_scaled(config['cpu_us_per_item'], 1e-6))} | "
            f"{_float(config['cores_busy'])} | {_faults(config.get('minor_faults_per_item'))} |"
        )
    return rows


def _startup_table(case: dict[str, Any]) -> list[str]:
    rows = [
        "| configuration | first batch, fresh loader (median) | min – max | first batch, second epoch (median) "
        "| min – max | vs torch, same num_workers (fresh / second) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for config in case["configs"]:
        fresh, second = config["seconds_stats"], config["second_epoch_stats"]
        ratios = ""
        if config["runner"] == "threadloader":
            ratios = (
                f"**{_ratio(config['vs_torch_same_workers'])} / "
                f"{_ratio(config['second_epoch_vs_torch_same_workers'])}**"
            )
        rows.append(
            f"| {config['label']} | {_time(fresh['median'])} | {_time(fresh['min'])} – {_time(fresh['max'])} | "
            f"{_time(second['median'])} | {_time(second['min'])} – {_time(second['max'])} | {ratios} |"
        )
    return rows


def _memory_table(case: dict[str, Any]) -> list[str]:
    rows = [
        "| configuration | dataset | above dataset | peak PSS, process tree | peak RSS sum, process tree "
        "| RSS sum above dataset | worker processes | epoch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for config in case["configs"]:
        m = config["memory"]
        above = f"{m['above_dataset_mib']:.1f} MiB"
        if config["runner"] == "threadloader":
            above = f"**{above}**"
        rows.append(
            f"| {config['label']} | {m['dataset_mib']:.0f} MiB | {above} | {m['peak_tree_pss_mib']:.0f} MiB | "
            f"{m['peak_tree_rss_mib']:.0f} MiB | {m['above_dataset_rss_mib']:.1f} MiB | {m['worker_processes']} | "
            f"{_time(m['seconds'])} |"
        )
    return rows


def format_markdown(results: dict[str, Any], *, heading_level: int = 1) -> str:
    """The results as markdown: the targets first, then one table per case."""
    h = "#" * heading_level
    scale = results["scale"]
    lines = [
        f"{h} Benchmark results",
        "",
        f"Command: `{results['command']}`. Scale `{scale['name']}`: {scale['warmup']} warm-up + "
        f"{scale['epochs']} timed epochs per configuration, interleaved. Started {results['started']}"
        f"{' at commit ' + results['commit'] if results.get('commit') else ''}.",
        "",
        f"Machine: {_machine_line(results['machine'])}",
        "",
        "Ratios are the median epoch time of torch's best configuration for the case over that of the "
        "configuration (above 1: faster than torch). Medians of whole epochs, `iter()` included. "
        "*CPU per item*: CPU time of the whole process tree (every thread and worker process) per item "
        "over the timed epochs; *cores busy*: that CPU time over the wall time; *page faults per item*: "
        "the process tree's minor page faults per item, median over the timed epochs (pages the kernel had to map: "
        "fresh memory, or copies after a fork; many mean the allocator gave memory back).",
        "",
        f"{h}# Targets",
        "",
        "| workload | target | measured | needed | |",
        "|---|---|---:|---:|---|",
    ]
    for workload in results["workloads"]:
        for target in workload["targets"]:
            baseline = f" vs {target['baseline']}" if target.get("baseline") else ""
            lines.append(
                f"| {workload['name']} | {target['label']}: {target['config']}{baseline} | "
                f"{format_target_value(target['metric'], target['measured'])} | {format_target_needed(target)} | "
                f"{'met' if target['met'] else '**missed**'} |"
            )
    for workload in results["workloads"]:
        lines += ["", f"{h}# {workload['name']}", "", workload["description"], ""]
        before, after = workload["effective_cpus"]
        cpus = results["machine"]["usable_cpus"]
        bandwidth = workload.get("memory_scaling", [math.nan, math.nan])  # absent from older results
        lines += [
            f"Ran {workload['seconds']:.0f} s; the machine gave {before:.1f} CPUs before it and {after:.1f} after "
            f"(of {cpus}; threads hashing outside the GIL), and {cpus} threads copying memory got "
            f"{bandwidth[0]:.2f}x and {bandwidth[1]:.2f}x the bandwidth of one.",
            "",
        ]
        for case in workload["cases"]:
            lines += [
                f"{h}## {workload['name']}: {case['name']} ({case['items']:,} items, batch {case['batch_size']})",
                "",
            ]
            if case["notes"]:
                lines += [case["notes"], ""]
            if case["extra"]:
                lines += ["Recorded: " + ", ".join(f"{k} = {v}" for k, v in case["extra"].items()) + ".", ""]
            table = {"epoch": _epoch_table, "startup": _startup_table, "memory": _memory_table}[case["mode"]]
            lines += table(case)
            lines.append("")
        if workload["processes_note"]:
            lines += [f"Where worker processes win: {workload['processes_note']}", ""]
    return "\n".join(lines).rstrip() + "\n"


# -- chart ------------------------------------------------------------------------------------


def _speed_panel(ax: Any, speed: list[dict[str, Any]]) -> None:
    """Each speed target's measured value against its threshold (log scale)."""
    green, red = "#2e8b57", "#c0392b"
    labels = [f"{t['label']}" for t in speed][::-1]
    values = [t["measured"] for t in speed][::-1]
    colors = [green if t["met"] else red for t in speed][::-1]
    ys = range(len(values))
    ax.barh(list(ys), values, color=colors)
    ax.scatter(
        [t["threshold"] for t in speed][::-1], list(ys), marker="|", s=400, color="black", zorder=3, label="target"
    )
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks(list(ys), labels)
    for y, v in zip(ys, values, strict=True):
        ax.text(v, y, f" {_ratio(v)}", va="center", fontsize=8)
    ax.set_xlabel("times faster than torch's best configuration (log; dashed: equal)")
    ax.set_title("ThreadLoader vs torch DataLoader")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(right=max(values + [t["threshold"] for t in speed]) * 3)


def _ceiling_panel(ax: Any, results: dict[str, Any], ceiling: list[dict[str, Any]]) -> None:
    """ThreadLoader's and torch's share of the CPU ceiling, per jpeg case."""
    green = "#2e8b57"
    red = "#c0392b"
    cpus = results["machine"]["usable_cpus"]
    cases = {(w["name"], c["name"]): c for w in results["workloads"] for c in w["cases"]}
    names, mine, torch_share = [], [], []
    for t in ceiling:
        case = next(c for (w, n), c in cases.items() if n == t["case"] and w in t["label"])
        rates = {c["label"]: c["items_per_s"] for c in case["configs"]}
        ceiling_rate = cpus * rates[t["baseline"]]
        names.append(t["case"].replace(" decode", ""))
        mine.append(100 * t["measured"])
        torch_share.append(100 * rates[case["torch_best"]["seconds_label"]] / ceiling_rate)
    xs = range(len(names))
    ax.bar(
        [x - 0.2 for x in xs],
        mine,
        width=0.4,
        color=[green if t["met"] else red for t in ceiling],
        label="ThreadLoader nw=2",
    )
    ax.bar([x + 0.2 for x in xs], torch_share, width=0.4, color="#ff7f0e", label="torch's best")
    ax.axhline(100 * ceiling[0]["threshold"], color="black", linewidth=1.5, label="target")
    for x, a, b in zip(xs, mine, torch_share, strict=True):
        ax.text(x - 0.2, a, f"{a:.0f}", ha="center", va="bottom", fontsize=8)
        ax.text(x + 0.2, b, f"{b:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), names, fontsize=8, rotation=15)
    ax.set_ylim(0, 150)
    ax.set_ylabel("% of cores x single-thread rate")
    ax.set_title("jpeg_pipeline: share of\nthe CPU ceiling", fontsize=10)
    ax.legend(loc="upper center", fontsize=7)


def _memory_panel(ax: Any, targets: list[dict[str, Any]], memory: list[tuple[str, float]], memory_items: int) -> None:
    """Peak memory above the dataset, per configuration (log scale)."""
    names = [m[0] for m in memory][::-1]
    values = [max(m[1], 0.1) for m in memory][::-1]
    colors = ["#1f77b4" if n.startswith("ThreadLoader") else "#ff7f0e" for n in names]
    ys = range(len(values))
    ax.barh(list(ys), values, color=colors)
    mem_target = next((t for t in targets if t["metric"] == "mib_above_dataset"), None)
    if mem_target is not None:
        ax.axvline(
            mem_target["threshold"], color="black", linewidth=1.5, label=f"target < {mem_target['threshold']:g} MiB"
        )
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xscale("log")
    ax.set_yticks(list(ys), names)
    for y, m in zip(ys, memory[::-1], strict=True):
        ax.text(max(m[1], 0.1), y, f" {m[1]:.1f} MiB", va="center", fontsize=8)
    ax.set_xlim(right=max(values) * 8)
    ax.set_xlabel("peak memory of the process tree above the dataset (MiB, log)")
    ax.set_title(f"Memory: {memory_items:,} Python strings")


def write_chart(results: dict[str, Any], path: Path) -> bool:
    """A PNG: every target's measured value against its threshold, and memory by configuration.
    Returns False (and writes nothing) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    targets = [t for w in results["workloads"] for t in w["targets"]]
    speed = [t for t in targets if t["metric"] in ("speedup", "first_batch", "first_batch_second_epoch")]
    ceiling = [t for t in targets if t["metric"] == "ceiling_fraction"]
    memory_cases = [case for w in results["workloads"] for case in w["cases"] if case["mode"] == "memory"]
    memory = [
        (c["label"] if len(memory_cases) == 1 else f"{c['label']} ({case['name']})", c["memory"]["above_dataset_mib"])
        for case in memory_cases
        for c in case["configs"]
    ]
    memory_items = memory_cases[0]["items"] if memory_cases else 0
    if not (speed or ceiling or memory):
        return False
    bottom = bool(ceiling or memory)
    top_rows = max(len(speed), 1)
    bottom_rows = max(len(memory), 4) if bottom else 0
    fig = plt.figure(figsize=(12, 0.38 * (top_rows + bottom_rows) + 2.5), layout="constrained")
    grid = fig.add_gridspec(2 if bottom else 1, 3, height_ratios=[top_rows, bottom_rows] if bottom else [1])
    axes = []
    if speed:
        axes.append(fig.add_subplot(grid[0, :]))
    if ceiling:
        axes.append(fig.add_subplot(grid[1, 0]))
    if memory:
        axes.append(fig.add_subplot(grid[1, 1:] if ceiling else grid[1, :]))
    ax_iter = iter(axes)
    if speed:
        _speed_panel(next(ax_iter), speed)
    if ceiling:
        _ceiling_panel(next(ax_iter), results, ceiling)
    if memory:
        _memory_panel(next(ax_iter), targets, memory, memory_items)
    machine = results["machine"]
    fig.suptitle(
        f"torch-threadloader benchmarks ({results['scale']['name']} run): {machine['usable_cpus']} CPUs, "
        f"Python {machine['python']}, torch {machine['torch']}; green = target met, red = missed",
        fontsize=10,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_outputs(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Writes ``results.json``, ``results.md`` and ``chart.png`` (when matplotlib is there)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "results.md"}
    paths["json"].write_text(json.dumps(results, indent=1) + "\n")
    paths["markdown"].write_text(format_markdown(results))
    chart = out_dir / "chart.png"
    if write_chart(results, chart):
        paths["chart"] = chart
    return paths
