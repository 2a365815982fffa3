"""``python -m benchmarks freethreaded [--scale quick|full|smoke] [--workload NAME] [--json PATH]``: threads against
processes on the interpreter that runs it (a GIL build, or a free-threaded 3.13t/3.14t one).

For ``python_cpu`` (pure-Python tokenising that reads the dataset's vocabulary and texts),
``image_augment`` (NumPy crop, flip, normalise) and the JPEG training pipeline (``decode_image``,
torchvision v2 transforms), each with the workload's own dataset: torch's ``DataLoader`` with 2
worker processes (persistent and not), and ``ThreadLoader`` with 0 workers, 2 worker threads
with default arguments (``worker_copy`` as this interpreter resolves it: ``"pickle"`` on a
free-threaded build with the GIL off, else ``"shallow"``; workers not persistent) and with
``worker_copy="shallow"`` (the GIL build's default), 2 persistent
worker threads with each ``worker_copy`` (``"shallow"``, ``"deep"``, ``"pickle"``), and
``worker_processes=2`` (one thread each). For ``python_cpu`` also 2 pickled worker threads
with ``own_random_state=False``, 2 worker processes with ``worker_copy="pickle"``, and
per-worker state built by torch's idiom: a ``worker_init_fn`` that rebuilds the hot objects on
``get_worker_info().dataset`` (:func:`own_hot_objects`; the worker's own shallow copy, on the
worker's thread). Whole epochs, interleaved in a shuffled order per round (``benchmarks.harness``),
so every configuration sees the same machine. Records, per workload, each configuration's rate
per epoch and its ratios to torch's 2 persistent workers and to ThreadLoader's 0 workers, and the
default configuration's rows: 2 threads with default arguments against 0 workers and against
torch's best (the faster of its two, by median), as ratios of epochs of the same round. Run it once per interpreter and put the two
tables side by side. ``--json PATH`` also writes the results to ``PATH``.
"""

from __future__ import annotations

import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch.utils.data

from benchmarks.harness import SCALES, Config, plain, run_case, threadloader
from benchmarks.result import Recorder, suite_parser
from benchmarks.workloads import load
from torch_threadloader.worker_info import default_worker_copy

__all__ = ["CASES", "CONFIGS", "DEFAULT", "EXTRA_CONFIGS", "TORCH", "main", "measure", "own_hot_objects"]

#: Each workload and the case of it measured here.
CASES = {
    "python_cpu": "tokenise 2.5 KB",
    "image_augment": "crop+flip+normalise",
    "jpeg_pipeline": "decode_image + RandomResizedCrop",
}

#: The configuration with default arguments but ``num_workers``: what a user gets.
DEFAULT = "ThreadLoader nw=2 defaults"
#: torch's configurations; the faster of them by median is "torch's best".
TORCH = ("torch nw=2", "torch nw=2 persistent")

#: The configurations, side by side.
CONFIGS = [
    Config(TORCH[0], "torch", {"num_workers": 2}),
    Config(TORCH[1], "torch", {"num_workers": 2, "persistent_workers": True}),
    threadloader("ThreadLoader nw=0", num_workers=0),
    threadloader(DEFAULT, num_workers=2),
    # The GIL build's default, beside it: what the default on a free-threaded build changes.
    threadloader("ThreadLoader nw=2 shallow, not persistent", num_workers=2, worker_copy="shallow"),
    threadloader("ThreadLoader nw=2 shallow", num_workers=2, persistent_workers=True, worker_copy="shallow"),
    threadloader("ThreadLoader nw=2 deep", num_workers=2, persistent_workers=True, worker_copy="deep"),
    threadloader("ThreadLoader nw=2 pickle", num_workers=2, persistent_workers=True, worker_copy="pickle"),
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
        # their thread does not own (docs/performance.md, "Free-threaded Python").
        threadloader(
            "ThreadLoader nw=2 pickle, own_random_state=False",
            num_workers=2,
            persistent_workers=True,
            worker_copy="pickle",
            own_random_state=False,
        ),
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


def measure(recorder: Recorder, scale_name: str, workloads: Sequence[str] = tuple(CASES)) -> None:
    """Record the rates (items/s) of every configuration of every workload, per epoch, their
    ratios to torch's 2 persistent workers and to ThreadLoader's 0 workers, and the default
    configuration's ratio to torch's best."""
    scale = SCALES[scale_name]
    build = {
        "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil_enabled": gil_enabled(),
        "default_worker_copy": default_worker_copy(),
    }
    for name in workloads:
        workload = load(name)
        with tempfile.TemporaryDirectory() as tmp, workload.cases(scale, Path(tmp)) as cases:
            case = next(c for c in cases if c.name == CASES[name])
            case = replace(case, configs=configs_of(name))
            result = run_case(case, scale)
        torch_rate = case.items / result.configs[TORCH[1]].median()
        best = min(TORCH, key=lambda label: result.configs[label].median())
        alone = case.items / result.configs["ThreadLoader nw=0"].median()
        params: dict[str, Any] = {"items": case.items, "scale": scale_name, **build}
        title = f"{name}: {case.name}"
        for label, config in result.configs.items():
            rates = [case.items / s for s in config.seconds]
            recorder.add(title, label, "items/s", rates, "items/s", **params)
            recorder.add(title, label, "vs torch nw=2 persistent", [r / torch_rate for r in rates], "x")
            recorder.add(title, label, "vs ThreadLoader nw=0", [r / alone for r in rates], "x")
        # Round by round (each round runs every configuration once, in a shuffled order), so a
        # busy moment of a shared machine slows both sides of a ratio.
        default = result.configs[DEFAULT].seconds
        paired = {best: result.configs[best].seconds, "ThreadLoader nw=0": result.configs["ThreadLoader nw=0"].seconds}
        for label, seconds in paired.items():
            ratios = [theirs / ours for ours, theirs in zip(default, seconds, strict=True)]
            recorder.add(title, DEFAULT, f"vs {label}, per round", ratios, "x", **params)


def main(argv: Sequence[str] | None = None, *, suite: str = "freethreaded") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="quick")
    parser.add_argument("--workload", action="append", choices=sorted(CASES), default=[])
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    recorder = Recorder(suite, argv)
    measure(recorder, "smoke" if args.smoke else args.scale, args.workload or tuple(CASES))
    if args.json is not None:
        recorder.write_file(args.json)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
