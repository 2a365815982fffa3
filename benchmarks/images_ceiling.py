"""Experiment: ThreadLoader beside two plain threads on the jpeg_pipeline training work.

    python -m benchmarks.images_ceiling [--images 256] [--rounds 7]

The harness's "no loader, 2 threads" (``benchmarks.harness.PlainLoop``) and
``ThreadLoader(num_workers=2, persistent_workers=True)``, both with ``default_collate``, over
the training dataset of ``benchmarks.workloads.jpeg_pipeline`` (decode_image,
RandomResizedCrop(224), flip, normalise), seeded (``Augmented``) and unseeded; one epoch of each
per round in a shuffled order, the first round dropped. Prints the process's CPU time per item
and the epoch time, median and range. See docs/images.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import PlainLoop
from benchmarks.workloads.jpeg_pipeline import train_dataset, write_jpegs
from torch_threadloader import ThreadLoader


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.images_ceiling", description=__doc__)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_jpegs(Path(tmp), args.images)
        seeded, unseeded = train_dataset(paths), train_dataset(paths, seeded=False)
        makers: dict[str, Callable[[], Iterable[Any]]] = {
            "two plain threads, seeded": lambda: PlainLoop(seeded, 32, None, 1, threads=2),
            "ThreadLoader nw=2, seeded": lambda: ThreadLoader(
                seeded, batch_size=32, num_workers=2, persistent_workers=True
            ),
            "two plain threads, unseeded": lambda: PlainLoop(unseeded, 32, None, 1, threads=2),
            "ThreadLoader nw=2, unseeded": lambda: ThreadLoader(
                unseeded, batch_size=32, num_workers=2, persistent_workers=True
            ),
        }
        loaders = {label: make() for label, make in makers.items()}
        cpu: dict[str, list[float]] = {label: [] for label in loaders}
        wall: dict[str, list[float]] = {label: [] for label in loaders}
        rng = random.Random(0)
        try:
            for round_ in range(args.rounds + 1):
                order = list(loaders)
                rng.shuffle(order)
                for label in order:
                    cpu_start, wall_start = time.process_time(), time.perf_counter()
                    items = sum(int(batch.shape[0]) for batch in loaders[label])
                    if round_:
                        cpu[label].append((time.process_time() - cpu_start) / items)
                        wall[label].append(time.perf_counter() - wall_start)
        finally:
            for loader in loaders.values():
                close = getattr(loader, "close", None)
                if callable(close):
                    close()
    print(f"{args.images} JPEGs, {args.rounds} rounds")
    print("| configuration | CPU per item, median (range) | epoch, median (range) |")
    print("|---|---:|---:|")
    for label in loaders:
        c, w = cpu[label], wall[label]
        print(
            f"| {label} | {statistics.median(c) * 1e3:.2f} ms ({min(c) * 1e3:.2f} – {max(c) * 1e3:.2f}) "
            f"| {statistics.median(w):.2f} s ({min(w):.2f} – {max(w):.2f}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
