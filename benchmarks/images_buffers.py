"""Experiment: page faults and time per batch of the collate step, fresh batches against reused ones.

    python -m benchmarks.images_buffers [--rounds 7] [--batches 24] [--workers 2]

The dataset returns stored 3x224x224 float32 tensors (64 of them, made once), so the only
memory an epoch allocates is the batch (32 x 588 KiB = 18.4 MiB): what is left is the collate.
Each round runs one epoch of each configuration, in a shuffled order, in this process:
``ThreadLoader(num_workers=N, persistent_workers=True)`` with ``default_collate`` and with
``BufferedCollate``, and the same two in the caller's thread (``num_workers=0``). Minor page
faults come from ``getrusage(RUSAGE_SELF)`` around the epoch (all threads). Prints the median
and the range over the rounds (the first round, which allocates the buffers, is dropped), and
the buffered/default ratio of faults per batch. See docs/images.md.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, default_collate

from torch_threadloader import ThreadLoader
from torch_threadloader.images import BufferedCollate

ITEMS_STORED = 64
BATCH = 32


class StoredImages(Dataset[torch.Tensor]):
    """Item ``i``: stored float32 image ``i % 64`` (no allocation per item)."""

    def __init__(self, size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = [torch.rand(3, 224, 224, generator=generator) for _ in range(ITEMS_STORED)]
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.images[index % ITEMS_STORED]


def epoch(loader: Any) -> tuple[float, int]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    for batch in loader:
        del batch
    elapsed = time.perf_counter() - start
    return elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.images_buffers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    dataset = StoredImages(args.batches * BATCH)
    capacity = args.workers * 2 + args.workers + 3
    makers: dict[str, Callable[[], Any]] = {
        f"nw={args.workers}, default_collate": lambda: ThreadLoader(
            dataset, batch_size=BATCH, num_workers=args.workers, persistent_workers=True, collate_fn=default_collate
        ),
        f"nw={args.workers}, BufferedCollate": lambda: ThreadLoader(
            dataset,
            batch_size=BATCH,
            num_workers=args.workers,
            persistent_workers=True,
            collate_fn=BufferedCollate(capacity=capacity),
        ),
        "nw=0, default_collate": lambda: ThreadLoader(dataset, batch_size=BATCH, collate_fn=default_collate),
        "nw=0, BufferedCollate": lambda: ThreadLoader(
            dataset, batch_size=BATCH, collate_fn=BufferedCollate(capacity=capacity)
        ),
    }
    loaders = {label: make() for label, make in makers.items()}
    seconds: dict[str, list[float]] = defaultdict(list)
    faults: dict[str, list[float]] = defaultdict(list)
    rng = random.Random(0)
    try:
        for round_ in range(args.rounds + 1):
            order = list(loaders)
            rng.shuffle(order)
            for label in order:
                gc.collect(1)
                elapsed, minflt = epoch(loaders[label])
                if round_ > 0:
                    seconds[label].append(elapsed / args.batches)
                    faults[label].append(minflt / args.batches)
    finally:
        for loader in loaders.values():
            loader.close()
    print(f"{args.rounds} rounds of {args.batches} batches of {BATCH} x 3x224x224 float32 (18.4 MiB a batch)")
    print("| configuration | per batch, median (min – max) | page faults per batch, median (min – max) |")
    print("|---|---:|---:|")
    for label in loaders:
        s, f = seconds[label], faults[label]
        print(
            f"| {label} | {statistics.median(s) * 1e3:.2f} ms ({min(s) * 1e3:.2f} – {max(s) * 1e3:.2f}) "
            f"| {statistics.median(f):.0f} ({min(f):.0f} – {max(f):.0f}) |"
        )
    for prefix in (f"nw={args.workers}", "nw=0"):
        default, buffered = faults[f"{prefix}, default_collate"], faults[f"{prefix}, BufferedCollate"]
        ratio = statistics.median(buffered) / max(statistics.median(default), 1e-9)
        speed = statistics.median(seconds[f"{prefix}, default_collate"]) / statistics.median(
            seconds[f"{prefix}, BufferedCollate"]
        )
        print(
            f"{prefix}: faults per batch, buffered / default = {ratio:.2%}; speed, buffered vs default = {speed:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
