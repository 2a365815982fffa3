"""Experiment: the C allocator's effect on loaders whose items and batches are MiB-sized.

    python -m benchmarks.allocator [--workload local_files] [--repeats 3] [--epochs 5]

Runs ``ThreadLoader(num_workers=2)``, ``ThreadLoader(num_workers=0)`` and torch's
``DataLoader(num_workers=0)`` over a workload's dataset (the harness's full size), each in a
fresh process per allocator setting, the settings alternated ``--repeats`` times: glibc's
defaults, glibc with tunables that keep freed memory (``TUNED``), and jemalloc and tcmalloc by
``LD_PRELOAD`` where Debian's ``libjemalloc2`` / ``libtcmalloc-minimal4`` are installed. Prints
the median epoch and the minor page faults per item of each loader. An allocator setting must
be made before the process starts, so this cannot run inside the harness. See
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from torch_threadloader.tools.info import GLIBC_KEEP_FREED

#: Keep up to 256 MiB free at the top of each heap and serve blocks up to 32 MiB (the most
#: glibc allows) from the heaps, instead of giving freed memory back to the kernel after
#: every batch and taking page faults to get it again; what ``info`` recommends.
TUNED = GLIBC_KEEP_FREED
LIBDIR = Path("/usr/lib/x86_64-linux-gnu") if Path("/usr/lib/x86_64-linux-gnu").is_dir() else Path("/usr/lib")
SETTINGS: dict[str, dict[str, str]] = {"glibc defaults": {}, "glibc tuned": {"GLIBC_TUNABLES": TUNED}}
for _name, _lib in (("jemalloc", "libjemalloc.so.2"), ("tcmalloc", "libtcmalloc_minimal.so.4")):
    if (LIBDIR / _lib).exists():
        SETTINGS[_name] = {"LD_PRELOAD": str(LIBDIR / _lib)}

LOADERS = ("ThreadLoader nw=2", "ThreadLoader nw=0", "torch nw=0")


def _child(workload: str, epochs: int, workdir: str) -> None:
    """In the fresh process: time each loader's epochs, interleaved; print JSON."""
    import torch
    from torch.utils.data import DataLoader

    from torch_threadloader import ThreadLoader

    if workload == "local_files":
        from benchmarks.workloads.local_files import FileDataset, write_files

        dataset: torch.utils.data.Dataset[torch.Tensor] = FileDataset(write_files(Path(workdir), 2_048))
    else:
        from benchmarks.workloads.image_augment import AugmentDataset

        dataset = AugmentDataset(2_048)
    loaders = {
        "ThreadLoader nw=2": ThreadLoader(dataset, batch_size=32, num_workers=2),
        "ThreadLoader nw=0": ThreadLoader(dataset, batch_size=32),
        "torch nw=0": DataLoader(dataset, batch_size=32),
    }
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for epoch in range(epochs + 1):
        for name, loader in loaders.items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            items = sum(int(batch.shape[0]) for batch in loader)
            elapsed = time.perf_counter() - start
            faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / items
            if epoch:  # the first is a warm-up
                out[name].append((elapsed, faults))
    for loader in loaders.values():
        close = getattr(loader, "close", None)
        if close is not None:
            close()
    print(json.dumps(out))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.allocator", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", action="append", choices=("local_files", "image_augment"), default=[])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.child[2])
        return 0
    for workload in args.workload or ["local_files", "image_augment"]:
        runs: dict[str, dict[str, list[tuple[float, float]]]] = {s: defaultdict(list) for s in SETTINGS}
        with tempfile.TemporaryDirectory() as workdir:
            for _ in range(args.repeats):
                for setting, env in SETTINGS.items():
                    command = [
                        sys.executable,
                        "-m",
                        "benchmarks.allocator",
                        "--child",
                        workload,
                        str(args.epochs),
                        workdir,
                    ]
                    done = subprocess.run(
                        command, env={**os.environ, **env}, capture_output=True, text=True, check=True
                    )
                    for name, values in json.loads(done.stdout.splitlines()[-1]).items():
                        runs[setting][name].extend(values)
        print(
            f"\n{workload}: median epoch (ms) / minor page faults per item, {args.repeats} processes x "
            f"{args.epochs} epochs per setting\n"
        )
        print("| allocator | " + " | ".join(LOADERS) + " | ThreadLoader nw=2 vs torch nw=0 |")
        print("|---|" + "---:|" * (len(LOADERS) + 1))
        for setting, per_loader in runs.items():
            medians = {n: statistics.median(v[0] for v in per_loader[n]) for n in LOADERS}
            cells = [f"{medians[n] * 1e3:.0f} / {statistics.median(v[1] for v in per_loader[n]):.0f}" for n in LOADERS]
            ratio = medians["torch nw=0"] / medians["ThreadLoader nw=2"]
            print(f"| {setting} | " + " | ".join(cells) + f" | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
