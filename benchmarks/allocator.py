"""The C allocator's effect on loaders whose items and batches are MiB-sized.

    python -m benchmarks allocator [--workload local_files] [--repeats 3] [--epochs 5] [--smoke]

Runs ``ThreadLoader(num_workers=2)``, ``ThreadLoader(num_workers=0)`` and torch's
``DataLoader(num_workers=0)`` over a workload's dataset (the harness's full size), each in a
fresh process per allocator setting, the settings alternated ``--repeats`` times: glibc's
defaults, glibc with tunables that keep freed memory (``TUNED``), and jemalloc and tcmalloc by
``LD_PRELOAD`` where Debian's ``libjemalloc2`` / ``libtcmalloc-minimal4`` are installed. Records
each loader's epoch time and minor page faults per item. An allocator setting must
be made before the process starts, so this cannot run inside the harness. See
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import close, fresh_process, interleave, ratios, time_epoch
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


def _child(workload: str, epochs: int, workdir: str, items: int) -> None:
    """In the fresh process: time each loader's epochs, interleaved; print JSON."""
    import torch
    from torch.utils.data import DataLoader

    from benchmarks.harness import count_items
    from torch_threadloader import ThreadLoader

    if workload == "local_files":
        from benchmarks.workloads.local_files import FileDataset, write_files

        dataset: torch.utils.data.Dataset[torch.Tensor] = FileDataset(write_files(Path(workdir), items))
    else:
        from benchmarks.workloads.image_augment import AugmentDataset

        dataset = AugmentDataset(items)
    loaders = {
        "ThreadLoader nw=2": ThreadLoader(dataset, batch_size=32, num_workers=2),
        "ThreadLoader nw=0": ThreadLoader(dataset, batch_size=32),
        "torch nw=0": DataLoader(dataset, batch_size=32),
    }
    runs = {name: (lambda ld=loader: time_epoch(ld, count_items)) for name, loader in loaders.items()}
    timings = interleave(runs, epochs, order="fixed")
    for loader in loaders.values():
        close(loader)
    print(json.dumps({name: [(t.wall, t.minor_faults / t.count) for t in ts] for name, ts in timings.items()}))


def main(argv: Sequence[str] | None = None, *, suite: str = "allocator") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--workload", action="append", choices=("local_files", "image_augment"), default=[])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--items", type=int, default=2_048)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.epochs, args.items = 1, 1, 64
    if args.child:
        _child(args.child[0], int(args.child[1]), args.child[2], args.items)
        return 0
    recorder = Recorder(suite, argv)
    for workload in args.workload or ["local_files", "image_augment"]:
        runs: dict[str, dict[str, list[tuple[float, float]]]] = {s: defaultdict(list) for s in SETTINGS}
        with tempfile.TemporaryDirectory() as workdir:
            for _ in range(args.repeats):
                for setting, env in SETTINGS.items():
                    child = ["--child", workload, str(args.epochs), workdir, "--items", str(args.items)]
                    for name, values in fresh_process("benchmarks.allocator", child, env=env).items():
                        runs[setting][name].extend(values)
        params = {"items": args.items, "epochs": args.epochs, "processes": args.repeats}
        for setting, per_loader in runs.items():
            for name in LOADERS:
                epochs = [1e3 * v[0] for v in per_loader[name]]
                recorder.add(f"{workload}: {setting}", name, "epoch", epochs, "ms", **params)
                faults = [v[1] for v in per_loader[name]]
                recorder.add(f"{workload}: {setting}", name, "minor page faults per item", faults, "", **params)
            speed = ratios([v[0] for v in per_loader["torch nw=0"]], [v[0] for v in per_loader["ThreadLoader nw=2"]])
            recorder.add(f"{workload}: {setting}", "ThreadLoader nw=2 vs torch nw=0", "speed", speed, "x", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
