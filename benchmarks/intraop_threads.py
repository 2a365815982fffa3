"""Experiment: torch's intra-op threads inside ThreadLoader's worker threads.

    python -m benchmarks.intraop_threads [--reps 3] [--epochs 6]

torch's worker processes each call ``torch.set_num_threads(1)``; ThreadLoader's worker threads
keep the process's setting (one OpenMP team per CPU), so on a 2-CPU machine two workers that
each run ``torch.stack`` in ``default_collate`` start two teams of two threads on two cores.
This runs, for three CPU-bound workloads, ``ThreadLoader(num_workers=2)`` as it is and with
``worker_init_fn`` calling ``torch.set_num_threads(1)`` (which, in an OpenMP build of torch,
sets the calling thread's team size), each in its own fresh process so the setting cannot leak
from one to the other, alternating, with torch's ``DataLoader(num_workers=0)`` in the same
process as a yardstick. It prints items/s, median over the repetitions.

Not part of the harness: ``torch.set_num_threads`` also changes the default for threads that
start later, which would leak into the other configurations of an interleaved run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WORKLOADS = ("image_augment", "local_files", "jpeg_pipeline")


def _dataset(workload: str, workdir: Path) -> Any:
    if workload == "image_augment":
        from torch_threadloader.bench.workloads.image_augment import AugmentDataset

        return AugmentDataset(1024)
    if workload == "local_files":
        from torch_threadloader.bench.workloads.local_files import FileDataset, write_files

        return FileDataset(write_files(workdir, 1024))
    from torch_threadloader.bench.workloads.jpeg_pipeline import JpegDataset, write_jpegs

    return JpegDataset(write_jpegs(workdir, 256), "pil")


def _one_torch_thread(worker_id: int) -> None:
    import torch

    torch.set_num_threads(1)


def child(workload: str, mode: str, epochs: int) -> dict[str, float]:
    import torch
    from torch.utils.data import DataLoader

    from torch_threadloader import ThreadLoader

    with tempfile.TemporaryDirectory() as tmp:
        dataset = _dataset(workload, Path(tmp))
        extra = {"worker_init_fn": _one_torch_thread} if mode == "1 thread per worker" else {}
        loaders: dict[str, Any] = {
            "ThreadLoader nw=2": ThreadLoader(dataset, batch_size=32, num_workers=2, **extra),
            "torch nw=0": DataLoader(dataset, batch_size=32),
        }
        times: dict[str, list[float]] = {k: [] for k in loaders}
        for epoch in range(epochs + 1):
            for label, loader in loaders.items():
                start = time.perf_counter()
                for _ in loader:
                    pass
                if epoch:  # the first is a warm-up
                    times[label].append(time.perf_counter() - start)
        loaders["ThreadLoader nw=2"].close()
        assert torch.get_num_threads() >= 1
        return {k: len(dataset) / statistics.median(v) for k, v in times.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.intraop_threads", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.epochs)))
        return 0
    modes = ("as it is", "1 thread per worker")
    print("| workload | ThreadLoader nw=2, intra-op threads | items/s (median) | torch nw=0 in the same processes |")
    print("|---|---|---:|---:|")
    for workload in WORKLOADS:
        rates: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        for _ in range(args.reps):
            for mode in modes:
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.intraop_threads", "--child", workload, mode,
                     "--epochs", str(args.epochs)],
                    capture_output=True, text=True, check=True,
                )
                rates[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
        for mode in modes:
            tl = statistics.median(r["ThreadLoader nw=2"] for r in rates[mode])
            ref = statistics.median(r["torch nw=0"] for r in rates[mode])
            print(f"| {workload} | {mode} | {tl:,.0f} | {ref:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
