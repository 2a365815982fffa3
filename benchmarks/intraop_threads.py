"""torch's intra-op threads inside ThreadLoader's worker threads.

    python -m benchmarks intraop_threads [--reps 3] [--epochs 5] [--smoke]

torch's worker processes each call ``torch.set_num_threads(1)``. Since commit 51b6af6
ThreadLoader does the same on each of its own worker threads (``torch_threadloader/intraop.py``:
the thread's OpenMP team size, that thread only). Before, its worker threads kept the process's
setting, so on a 2-CPU machine two workers that each ran ``torch.stack`` in ``default_collate``
started two teams of two threads on two cores.

This runs, for three CPU-bound workloads, ``ThreadLoader(num_workers=2)`` as it is (one
intra-op thread per worker thread) and with ``worker_init_fn`` calling
``torch.set_num_threads(N)``, N the process's setting, which puts each worker thread back on a
team of N: the loader before that change. Each configuration runs in its own fresh process,
so the setting cannot leak from one to the other, alternating, with torch's
``DataLoader(num_workers=0)`` in the same process as a yardstick. It records items/s per
process, and the team size each worker thread saw.

Not part of the harness: ``torch.set_num_threads`` on a worker thread also changes the default
for threads that start later, which would leak into the other configurations of an
interleaved run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import fresh_process

WORKLOADS = ("image_augment", "local_files", "jpeg_pipeline")
MODES = ("as it is (1 per worker)", "N per worker (worker_init_fn)")


def _dataset(workload: str, workdir: Path, items: int) -> Any:
    if workload == "image_augment":
        from benchmarks.workloads.image_augment import AugmentDataset

        return AugmentDataset(items)
    if workload == "local_files":
        from benchmarks.workloads.local_files import FileDataset, write_files

        return FileDataset(write_files(workdir, items))
    from benchmarks.workloads.jpeg_pipeline import JpegDataset, write_jpegs

    return JpegDataset(write_jpegs(workdir, items // 4), "pil")


def _worker_init(restore: int | None, seen: list[int]) -> Callable[[int], None]:
    import torch

    def init(worker_id: int) -> None:
        if restore is not None:
            torch.set_num_threads(restore)
        seen.append(torch.get_num_threads())

    return init


def child(workload: str, mode: str, epochs: int, items: int) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader

    from benchmarks.timing import interleave, time_epoch
    from torch_threadloader import ThreadLoader

    process_threads = torch.get_num_threads()
    seen: list[int] = []
    restore = process_threads if mode == MODES[1] else None
    with tempfile.TemporaryDirectory() as tmp:
        dataset = _dataset(workload, Path(tmp), items)
        loaders: dict[str, Any] = {
            "ThreadLoader nw=2": ThreadLoader(
                dataset, batch_size=32, num_workers=2, worker_init_fn=_worker_init(restore, seen)
            ),
            "torch nw=0": DataLoader(dataset, batch_size=32),
        }
        runs = {label: (lambda ld=loader: time_epoch(ld).wall) for label, loader in loaders.items()}
        times = interleave(runs, epochs, order="fixed")
        loaders["ThreadLoader nw=2"].close()
        assert torch.get_num_threads() == process_threads  # the main thread kept its setting
        rates: dict[str, Any] = {k: len(dataset) / sorted(v)[len(v) // 2] for k, v in times.items()}
        rates["worker_threads_seen"] = sorted(set(seen))
        rates["process_threads"] = process_threads
        return rates


def main(argv: Sequence[str] | None = None, *, suite: str = "intraop_threads") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--items", type=int, default=1024, help="items per epoch")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.reps, args.epochs, args.items = 1, 1, 64
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.epochs, args.items)))
        return 0
    recorder = Recorder(suite, argv)
    for workload in WORKLOADS:
        rates: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for _ in range(args.reps):
            for mode in MODES:
                options = ["--epochs", str(args.epochs), "--items", str(args.items)]
                rates[mode].append(fresh_process("benchmarks.intraop_threads", ["--child", workload, mode, *options]))
        for mode in MODES:
            seen = sorted({n for r in rates[mode] for n in r["worker_threads_seen"]})
            config = "ThreadLoader nw=2, " + mode.replace("N per", f"{rates[mode][0]['process_threads']} per")
            params = {"items": args.items, "epochs": args.epochs, "team_sizes_seen": seen}
            recorder.add(
                workload, config, "items/s", [r["ThreadLoader nw=2"] for r in rates[mode]], "items/s", **params
            )
            yardstick = [r["torch nw=0"] for r in rates[mode]]
            recorder.add(workload, f"torch nw=0 beside {config}", "items/s", yardstick, "items/s", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
