"""Experiment: what each worker's own global random state costs (``own_random_state=True``,
the default) beside the workers on the process's shared state (``own_random_state=False``),
in one run.

    python -m benchmarks.random_state_cost [--rounds 7] [--items 1024]

Inside a worker's calls the loader enters a block (``random_state.drawing``): a context
variable set and torch's function mode pushed, per batch (per item where items run at once),
and every torch call of the item then passes the mode's Python ``__torch_function__``. This
loads, with ``batch_size=32``, ``num_workers=2`` and persistent workers, the same epoch both
ways, alternating the order each round:

- ``image_augment``: the harness's NumPy crop, flip and normalise of a 3x256x256 image (no
  torch call in the item);
- ``jpeg_pipeline``: the harness's ``decode_image`` + ``RandomResizedCrop(224)``, flip,
  ``ToDtype``, ``Normalize`` (torchvision v2, draws from the global generator), JPEGs in memory;
- ``v2 draws``: a 3x32x32 crop, flip and jitter of 6 torch calls (``benchmarks.worker_state``'s
  ``Draws``): the worst case, per-call overhead on tiny tensors.

Prints items/s (median [range]) and the own/shared throughput ratio of each round's pair.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from benchmarks.worker_state import Draws, _epoch_rate, _summary
from benchmarks.workloads.image_augment import AugmentDataset
from benchmarks.workloads.jpeg_pipeline import DecodedJpegs, _Transformed, train_transform, write_jpegs
from torch_threadloader import ThreadLoader


def compare(name: str, make: Callable[[], Dataset[Any]], items: int, rounds: int) -> float:
    """Print the on/off figures for one dataset; return the median on/off ratio."""
    loaders = {
        on: ThreadLoader(make(), batch_size=32, num_workers=2, persistent_workers=True, own_random_state=on)
        for on in (False, True)
    }
    rates: dict[bool, list[float]] = {False: [], True: []}
    ratios: list[float] = []
    try:
        for r in range(rounds + 1):
            got = {}
            for on in (True, False) if r % 2 else (False, True):
                got[on] = _epoch_rate(loaders[on], items)
            if r == 0:
                continue  # warm-up: threads, first allocations
            for on in (False, True):
                rates[on].append(got[on])
            ratios.append(got[True] / got[False])
    finally:
        for loader in loaders.values():
            loader.close()
    ratio = statistics.median(ratios)
    print(
        f"{name:14s} shared {_summary(rates[False])}  own {_summary(rates[True])}  "
        f"own/shared {ratio:.3f} [{min(ratios):.3f} .. {max(ratios):.3f}]"
    )
    return ratio


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--items", type=int, default=1024)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{args.items} items an epoch, batch_size=32, num_workers=2, {args.rounds} rounds (items/s, median [range])")
    compare("image_augment", lambda: AugmentDataset(args.items), args.items, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_jpegs(Path(tmp), 64)
        decoded = DecodedJpegs([paths[i % len(paths)] for i in range(args.items)])
        compare("jpeg_pipeline", lambda: _Transformed(decoded, train_transform()), args.items, args.rounds)
    compare("v2 draws", lambda: Draws(args.items), args.items, args.rounds)


if __name__ == "__main__":
    main()
