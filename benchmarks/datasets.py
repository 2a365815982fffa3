"""The datasets of the suites, each written once.

The harness's workloads keep their per-item work in their own modules
(:mod:`benchmarks.workloads`); the datasets here are the small ones the suites share: items
that cost nothing (:class:`IndexDataset` and its async and iterable forms), items that wait
(:class:`SleepDataset`, :class:`RandomWaits`), items that fail, draw random numbers, hold a
vocabulary, images kept in memory and arrays of mixed sizes.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from benchmarks.workloads.python_cpu import TokenizeDataset

__all__ = [
    "AsyncIndexDataset",
    "AsyncSleepDataset",
    "CarryingDataset",
    "DrawsDataset",
    "FailingDataset",
    "IndexDataset",
    "MixedSizes",
    "RandomWaits",
    "SleepDataset",
    "StampedDataset",
    "StoredImages",
    "StreamDataset",
    "VocabularyDataset",
    "WaitThenTokenize",
    "as_list",
    "lognormal_latencies",
]


def as_list(batch: list[Any]) -> list[Any]:
    """A ``collate_fn`` that returns the list of items itself: what is left is the loader's path."""
    return batch


class IndexDataset(Dataset[int]):
    """``dataset[i] == i``: in memory, no work at all."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


class AsyncIndexDataset(IndexDataset):
    """The same items from ``async def __getitem__``."""

    async def __getitem__(self, index: int) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        return index


class StreamDataset(IterableDataset[int]):
    """``range(size)``, sharded by worker as torch's docs shard an ``IterableDataset``."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        if info is None:
            return iter(range(self.size))
        return iter(range(info.id, self.size, info.num_workers))


class StampedDataset(IndexDataset):
    """``IndexDataset`` that notes when the first and the last item of batch 0 (of
    ``batch_size``) are loaded, in ``stamps`` (a list its workers' shallow copies share)."""

    def __init__(self, size: int, batch_size: int = 32) -> None:
        super().__init__(size)
        self.last_index = batch_size - 1
        self.stamps = [0.0, 0.0]

    def __getitem__(self, index: int) -> int:
        if index == 0:
            self.stamps[0] = time.perf_counter()
        elif index == self.last_index:
            self.stamps[1] = time.perf_counter()
        return index


class FailingDataset(IndexDataset):
    """Item ``i`` is ``i``; every ``every``-th (the odd ones by default) raises, as a corrupt file would."""

    def __init__(self, size: int, every: int = 2) -> None:
        super().__init__(size)
        self.every = every

    def __getitem__(self, index: int) -> int:
        if index % self.every == self.every - 1:
            raise ValueError(f"sample {index} is corrupt")
        return index


def lognormal_latencies(n: int, ms: float, seed: int = 0, slow_share: float = 0.01) -> list[float]:
    """Heavy-tailed waits in seconds: lognormal (median ``ms``, sigma 0.5), and ``slow_share``
    of them 20x longer; fixed per index by ``seed``."""
    g = torch.Generator().manual_seed(seed)
    base = torch.empty(n).log_normal_(0.0, 0.5, generator=g) * (ms / 1000)
    slow = torch.rand(n, generator=g) < slow_share
    return (base * torch.where(slow, 20.0, 1.0)).tolist()


class SleepDataset(Dataset[int]):
    """Item ``i`` sleeps ``delays[i]`` seconds (the GIL released, as I/O) and is ``i``."""

    def __init__(self, delays: list[float]) -> None:
        self.delays = delays

    def __len__(self) -> int:
        return len(self.delays)

    def __getitem__(self, index: int) -> int:
        time.sleep(self.delays[index])
        return index


class AsyncSleepDataset(SleepDataset):
    """The same waits in ``async def __getitem__``."""

    async def __getitem__(self, index: int) -> int:  # type: ignore[override]
        await asyncio.sleep(self.delays[index])
        return index


class RandomWaits(IndexDataset):
    """Items that finish out of order: a wait up to 0.5 ms, and one item in 500 waits 20 ms
    (fixed per index)."""

    def __getitem__(self, index: int) -> int:
        rng = random.Random(index)
        time.sleep(0.02 if rng.random() < 0.002 else rng.random() * 0.0005)
        return index


class DrawsDataset(Dataset[torch.Tensor]):
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


class VocabularyDataset(Dataset[int]):
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


class StoredImages(Dataset[torch.Tensor]):
    """Item ``i``: stored float32 3x224x224 image ``i % stored`` (no allocation per item)."""

    def __init__(self, size: int, stored: int = 64) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = [torch.rand(3, 224, 224, generator=generator) for _ in range(stored)]
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.images[index % len(self.images)]


class MixedSizes(Dataset[np.ndarray]):
    """Arrays of mixed sizes, 1 KiB to 8 MiB, every page touched (as a decoded sample's)."""

    SIZES = (1024, 64 * 1024, 8 << 20, 256 * 1024, 2 << 20, 4096, 1 << 20, 16 * 1024)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        a = np.empty(self.SIZES[i % len(self.SIZES)], dtype=np.uint8)
        a.fill(i % 251)
        return a


class WaitThenTokenize(TokenizeDataset):
    """An I/O wait (``time.sleep``, 5 ms, which releases the GIL) then ``python_cpu``'s
    pure-Python tokenising: work that wants many loads in flight and more than one GIL."""

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.005)
        return super().__getitem__(index)


class CarryingDataset(TokenizeDataset):
    """``python_cpu``'s dataset also holding ``mib`` MiB of Python strings (1 KiB each): what a
    worker started by spawn or forkserver receives pickled before its first item."""

    def __init__(self, items: int, mib: int) -> None:
        super().__init__(items)
        self.payload = [f"{i:08d}" + "x" * 1016 for i in range(mib * 1024)]
