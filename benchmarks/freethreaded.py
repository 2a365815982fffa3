"""``python -m benchmarks.freethreaded [--scale quick|full|smoke] [--json PATH]``: threads against
processes on the interpreter that runs it (a GIL build, or a free-threaded 3.13t/3.14t one).

For ``python_cpu`` (pure-Python tokenising), ``image_augment`` (NumPy crop, flip, normalise) and
the JPEG training pipeline (``decode_image``, torchvision v2 transforms), each with the
workload's own dataset: torch's ``DataLoader`` with 2 persistent worker processes, and
``ThreadLoader`` with 0 workers, 2 (persistent) worker threads (each with a shallow, then a
deep, ``worker_copy`` of the dataset), and ``worker_processes=2`` (one
thread each). For ``python_cpu`` also 2 worker threads and 2 worker processes with
``worker_copy="pickle"`` (each worker's copy unpickled on its own thread), and with per-worker
state built by torch's idiom: a ``worker_init_fn`` that rebuilds the hot objects on
``get_worker_info().dataset`` (:func:`own_hot_objects`; the worker's own shallow copy, on the
worker's thread). Whole epochs, interleaved in a shuffled order per round (``benchmarks.harness``),
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

import torch.utils.data

from benchmarks.harness import SCALES, Config, plain, run_case, threadloader
from benchmarks.workloads import load

__all__ = ["CASES", "CONFIGS", "EXTRA_CONFIGS", "main", "measure", "own_hot_objects"]

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


def _own_str(text: str) -> str:
    """A new ``str`` equal to ``text``, made by the calling thread (``copy.deepcopy`` and
    ``str(text)`` return ``text`` itself); one character is CPython's immortal singleton."""
    return text.encode().decode()


def _own_int(value: int) -> int:
    """A new ``int`` equal to ``value`` (``-5 .. 256`` are CPython's immortal small ints)."""
    return int(repr(value))


def own_hot_objects(worker_id: int) -> None:
    """``worker_init_fn`` for ``python_cpu``'s ``TokenizeDataset``: per-worker state as a torch
    user writes it. ``get_worker_info().dataset`` is this worker's own copy of the dataset
    (``worker_copy="shallow"``, made on the worker's thread) and this runs on that thread, so
    the vocabulary (its dict, keys and values) and the texts rebuilt here are objects the worker
    thread made: on a free-threaded build their reference counts are the worker's own, not
    contended with the other worker (a deep copy shares ``str`` and ``int``)."""
    info = torch.utils.data.get_worker_info()
    assert info is not None, "own_hot_objects runs as a worker_init_fn"
    dataset: Any = info.dataset
    dataset.vocab = {_own_str(word): _own_int(i) for word, i in dataset.vocab.items()}
    dataset.texts = [_own_str(text) for text in dataset.texts]


#: Configurations measured for one workload only, after :data:`CONFIGS`.
EXTRA_CONFIGS = {
    "python_cpu": [
        threadloader(
            "ThreadLoader nw=2 per-worker state",
            num_workers=2,
            persistent_workers=True,
            worker_init_fn=own_hot_objects,
        ),
        # The same idiom in worker processes: a child unpickles its dataset on another thread
        # than the one that runs its items, so on a free-threaded build the items read objects
        # their thread does not own (docs/benchmarks.md, "Free-threaded Python").
        threadloader("ThreadLoader nw=2 pickle", num_workers=2, persistent_workers=True, worker_copy="pickle"),
        threadloader("ThreadLoader processes=2 pickle", num_workers=1, worker_processes=2, worker_copy="pickle"),
        threadloader(
            "ThreadLoader processes=2 per-worker state",
            num_workers=1,
            worker_processes=2,
            worker_init_fn=own_hot_objects,
        ),
    ],
    # The ceiling of any thread loader on this work: 2 plain threads, no loader, no bound.
    "jpeg_pipeline": [plain(threads=2)],
}


def configs_of(workload: str) -> list[Config]:
    """The configurations measured for ``workload``."""
    return [*CONFIGS, *EXTRA_CONFIGS.get(workload, [])]


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
            case = replace(case, configs=configs_of(name))
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
        alone = rates["ThreadLoader nw=0"]["median"]
        for r in rates.values():
            r["vs_torch"] = r["median"] / torch_rate
            r["vs_nw0"] = r["median"] / alone
        out["workloads"][name] = {"case": case.name, "items": case.items, "rates": rates}
    return out


def markdown(result: dict[str, Any]) -> str:
    """One row per workload: each configuration's median rate (range), its ratio to torch's and
    to ThreadLoader's 0 workers (a cell of a configuration not measured for that workload is "-")."""
    build = "free-threaded, GIL off" if not result["gil_enabled"] else "GIL"
    labels = list(dict.fromkeys(c.label for w in result["workloads"] for c in configs_of(w)))
    head = "| workload | " + " | ".join(labels) + " |"
    lines = [
        f"Python {result['python']} ({build}), scale {result['scale']}",
        "",
        head,
        "|---" * (len(labels) + 1) + "|",
    ]
    for name, w in result["workloads"].items():
        cells = []
        for label in labels:
            r = w["rates"].get(label)
            if r is None:
                cells.append("-")
                continue
            cells.append(
                f"{r['median']:,.0f}/s ({r['min']:,.0f}–{r['max']:,.0f}) {r['vs_torch']:.2f}x torch, {r['vs_nw0']:.2f}x nw=0"
            )
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
