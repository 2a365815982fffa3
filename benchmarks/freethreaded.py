"""``python -m benchmarks.freethreaded [--scale quick|full|smoke] [--json PATH]``: threads against
processes on the interpreter that runs it (a GIL build, or a free-threaded 3.13t/3.14t one).

For ``python_cpu`` (pure-Python tokenising), ``image_augment`` (NumPy crop, flip, normalise) and
the JPEG training pipeline (``decode_image``, torchvision v2 transforms), each with the
workload's own dataset: torch's ``DataLoader`` with 2 persistent worker processes, and
``ThreadLoader`` with 0 workers, 2 (persistent) worker threads (each with a shallow, then a
deep, ``worker_copy`` of the dataset), and ``worker_processes=2`` (one
thread each). Whole epochs, interleaved in a shuffled order per round (``benchmarks.harness``),
so every configuration sees the same machine. Prints, per workload, each configuration's median
rate with the range of its epochs and its ratio to torch's; run it once per interpreter and put
the two tables side by side (``docs/benchmarks.md``, "Free-threaded Python").
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.harness import SCALES, Config, run_case, threadloader
from benchmarks.workloads import load

__all__ = ["CONFIGS", "CASES", "main", "measure"]

#: Each workload and the case of it measured here.
CASES = {
    "python_cpu": "tokenise 2.5 KB",
    "image_augment": "crop+flip+normalise",
    "jpeg_pipeline": "decode_image + RandomResizedCrop",
}

#: The configurations, side by side.
CONFIGS = [
    Config("torch nw=2 persistent", "torch", {"num_workers": 2, "persistent_workers": True}),
    threadloader("ThreadLoader nw=0", num_workers=0),
    threadloader("ThreadLoader nw=2", num_workers=2, persistent_workers=True),
    threadloader("ThreadLoader nw=2 deep", num_workers=2, persistent_workers=True, worker_copy="deep"),
    threadloader("ThreadLoader processes=2", num_workers=1, worker_processes=2),
]


def gil_enabled() -> bool:
    """Whether the running interpreter has the GIL on (always, before 3.13)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def measure(scale_name: str, workloads: Sequence[str] = tuple(CASES)) -> dict[str, Any]:
    """Rates (items/s) of every configuration of every workload, with their epochs' spread."""
    scale = SCALES[scale_name]
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil_enabled": gil_enabled(),
        "scale": scale_name,
        "workloads": {},
    }
    for name in workloads:
        workload = load(name)
        with tempfile.TemporaryDirectory() as tmp, workload.cases(scale, Path(tmp)) as cases:
            case = next(c for c in cases if c.name == CASES[name])
            case = replace(case, configs=CONFIGS)
            result = run_case(case, scale)
        rates: dict[str, Any] = {}
        for label, config in result.configs.items():
            per_epoch = sorted(case.items / s for s in config.seconds)
            rates[label] = {
                "median": per_epoch[len(per_epoch) // 2],
                "min": per_epoch[0],
                "max": per_epoch[-1],
                "epochs": len(per_epoch),
            }
        torch_rate = rates["torch nw=2 persistent"]["median"]
        for r in rates.values():
            r["vs_torch"] = r["median"] / torch_rate
        out["workloads"][name] = {"case": case.name, "items": case.items, "rates": rates}
    return out


def markdown(result: dict[str, Any]) -> str:
    """One row per workload: each configuration's median rate (range) and its ratio to torch's."""
    build = "free-threaded, GIL off" if not result["gil_enabled"] else "GIL"
    head = "| workload | " + " | ".join(c.label for c in CONFIGS) + " |"
    lines = [
        f"Python {result['python']} ({build}), scale {result['scale']}",
        "",
        head,
        "|---" * (len(CONFIGS) + 1) + "|",
    ]
    for name, w in result["workloads"].items():
        cells = []
        for c in CONFIGS:
            r = w["rates"][c.label]
            cells.append(f"{r['median']:,.0f}/s ({r['min']:,.0f}–{r['max']:,.0f}) {r['vs_torch']:.2f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.freethreaded", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="quick")
    parser.add_argument("--workload", action="append", choices=sorted(CASES), default=[])
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    result = measure(args.scale, args.workload or tuple(CASES))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
