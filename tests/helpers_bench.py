"""Factories for ``python -m torch_threadloader bench`` (tests/tools/test_bench.py), named by
what they return. Importable by name, so torch's worker processes can load them."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler

from torch_threadloader import ThreadLoader


class SleepyDataset(Dataset[tuple[torch.Tensor, int]]):
    """``n`` items, each a 4-float tensor and its index, after ``delay`` seconds of sleep (I/O)."""

    def __init__(self, n: int = 32, delay: float = 0.001) -> None:
        self.n = n
        self.delay = delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.delay)
        return torch.full((4,), float(i)), i


class AsyncSleepyDataset:
    """``SleepyDataset`` with ``async def __getitem__``: torch's DataLoader cannot run it."""

    def __init__(self, n: int = 32) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, i: int) -> torch.Tensor:
        await asyncio.sleep(0.001)
        return torch.full((4,), float(i))


class OnlyInThisProcess(SleepyDataset):
    """Fails in any process but the one that made it (like a dataset holding an open
    connection): torch's worker processes fail, threads do not."""

    def __init__(self) -> None:
        super().__init__()
        self.pid = os.getpid()

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if os.getpid() != self.pid:
            raise RuntimeError(f"OnlyInThisProcess: item {i} read in process {os.getpid()}, made in {self.pid}")
        return super().__getitem__(i)


class CountingCollate:
    """A collate_fn that counts its calls (thread-safe) and returns ``{"x": tensor}``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0

    def __call__(self, items: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
        with self._lock:
            self.calls += 1
        return {"x": torch.stack([x for x, _ in items])}


COLLATE = CountingCollate()


class ShardedStream(IterableDataset[torch.Tensor]):
    """``n`` 3-float tensors, split between the workers of either loader by ``get_worker_info()``."""

    def __init__(self, n: int = 40) -> None:
        self.n = n

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()  # looked up at call time: answers per thread too
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(worker, self.n, workers):
            yield torch.full((3,), float(i))


def sleepy_dataset() -> SleepyDataset:
    return SleepyDataset()


def sleepier_dataset() -> SleepyDataset:
    """Items that sleep 10 ms: waiting outweighs the loader's CPU even on a loaded machine (the
    suite's parallel workers, coverage), so more sleeps in flight measurably win."""
    return SleepyDataset(delay=0.01)


def sleepy_threadloader() -> ThreadLoader[Any]:
    return ThreadLoader(SleepyDataset(), batch_size=8, num_workers=1, item_concurrency=3)


def shuffled_dataloader_with_collate() -> DataLoader[Any]:
    return DataLoader(SleepyDataset(), batch_size=4, shuffle=True, collate_fn=COLLATE)


def unbatched_dataloader() -> DataLoader[Any]:
    return DataLoader(SleepyDataset(), batch_size=None)


def batch_sampler_dataloader() -> DataLoader[Any]:
    data = SleepyDataset()
    return DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 5, drop_last=False))


def sharded_stream() -> ShardedStream:
    return ShardedStream()


def async_dataset() -> AsyncSleepyDataset:
    return AsyncSleepyDataset()


def only_in_this_process() -> OnlyInThisProcess:
    return OnlyInThisProcess()


def empty_dataset() -> SleepyDataset:
    return SleepyDataset(n=0)


def not_a_dataset() -> int:
    return 42


def broken() -> SleepyDataset:
    raise OSError("the data directory is not mounted")


NOT_CALLABLE = SleepyDataset()
