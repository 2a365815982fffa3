"""Experiment: what ``per_sample_rng=True`` and ``worker_copy="deep"`` cost, each side by side
with the switch off, in one run.

    python -m benchmarks.worker_state [--rounds 7] [--items 2000] [--vocab 20000]

``per_sample_rng``: a map-style dataset whose item makes the draws of a small v2-style
augmentation (``torch.rand``, ``torch.randint``, ``torch.empty(..).uniform_()``) and a little
tensor work, loaded with ``batch_size=32`` by ``num_workers`` 0 and 2, the switch off and on
in alternating order; each round is one whole epoch. Prints items/s per setting (median and
range over the rounds) and the on/off ratio of each round's pair (median and range).

``worker_copy``: the time ``copy.copy`` and ``copy.deepcopy`` take on a pure-Python dataset
holding a vocabulary of ``--vocab`` words (a dict and a list; that is what each worker pays
when it starts, once per epoch without persistent workers), and the epoch throughput of that
dataset with 2 worker threads, shallow vs deep, alternating. On a GIL build the deep copy
buys nothing for throughput; it is for free-threaded builds, where reading shared objects
contends on their reference counts (benchmarks.freethreaded measures it there). See docs/guide.md.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader


class Draws(Dataset[torch.Tensor]):
    """Item ``i``: a 3x32x32 tensor cropped, flipped and jittered with draws from torch's
    global generator (what torchvision v2 transforms do inside ``__getitem__``)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.image = torch.rand(3, 40, 40, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        top, left = (int(v) for v in torch.randint(0, 9, (2,)))
        out = self.image[:, top : top + 32, left : left + 32]
        if torch.rand(()) < 0.5:
            out = out.flip(-1)
        return out * torch.empty(()).uniform_(0.8, 1.2)


class Vocabulary(Dataset[int]):
    """Pure-Python items over a vocabulary (a dict and a list of strings): a worker's hot objects."""

    def __init__(self, n: int, vocab: int) -> None:
        self.n = n
        self.words = [f"word{j}" for j in range(vocab)]
        self.index = {w: j for j, w in enumerate(self.words)}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        total = 0
        start = (i * 37) % (len(self.words) - 64)
        for w in self.words[start : start + 64]:
            total += self.index[w]
        return total


def _epoch_rate(loader: ThreadLoader[Any], items: int) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return items / (time.perf_counter() - start)


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):10.0f}  [{min(values):.0f} .. {max(values):.0f}]"


def _ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}  [{min(values):.3f} .. {max(values):.3f}]"


def per_sample_rng(rounds: int, items: int) -> None:
    print(f"per_sample_rng: {items} items of Draws, batch_size=32, {rounds} rounds (items/s, median [range])")
    for workers in (0, 2):
        loaders = {
            flag: ThreadLoader(
                Draws(items), batch_size=32, num_workers=workers, generator=torch.Generator(), per_sample_rng=flag
            )
            for flag in (False, True)
        }
        rates: dict[bool, list[float]] = {False: [], True: []}
        ratios: list[float] = []
        for r in range(rounds + 1):
            order = (False, True) if r % 2 else (True, False)
            got = {flag: _epoch_rate(loaders[flag], items) for flag in order}
            if r == 0:
                continue  # warm-up: threads, first allocations
            for flag in (False, True):
                rates[flag].append(got[flag])
            ratios.append(got[True] / got[False])
        for loader in loaders.values():
            loader.close()
        print(f"  num_workers={workers}  off {_summary(rates[False])}   on {_summary(rates[True])}")
        print(f"  num_workers={workers}  on/off ratio {_ratio(ratios)}")


def worker_copy(rounds: int, items: int, vocab: int) -> None:
    ds = Vocabulary(items, vocab)
    for how, fn in (("copy.copy", copy.copy), ("copy.deepcopy", copy.deepcopy)):
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            fn(ds)
            times.append((time.perf_counter() - start) * 1e3)
        print(
            f"worker_copy: {how:14s} of a {vocab}-word vocabulary: {statistics.median(times):8.3f} ms "
            f"[{min(times):.3f} .. {max(times):.3f}] per worker start"
        )
    loaders = {
        mode: ThreadLoader(ds, batch_size=32, num_workers=2, worker_copy=mode, persistent_workers=True)
        for mode in ("shallow", "deep")
    }
    rates: dict[str, list[float]] = {"shallow": [], "deep": []}
    ratios: list[float] = []
    for r in range(rounds + 1):
        order = ("shallow", "deep") if r % 2 else ("deep", "shallow")
        got = {mode: _epoch_rate(loaders[mode], items) for mode in order}
        if r == 0:
            continue
        for mode in rates:
            rates[mode].append(got[mode])
        ratios.append(got["deep"] / got["shallow"])
    for loader in loaders.values():
        loader.close()
    print(f"  2 threads, persistent: shallow {_summary(rates['shallow'])}   deep {_summary(rates['deep'])}")
    print(f"  deep/shallow ratio {_ratio(ratios)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_state", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--vocab", type=int, default=20000)
    args = parser.parse_args(argv)
    per_sample_rng(args.rounds, args.items)
    worker_copy(args.rounds, args.items, args.vocab)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
