"""remote: items that wait 10 ms on a (simulated) remote service: blocking or async."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from torch.utils.data import Dataset

from benchmarks.harness import Case, Scale, Target, Workload, threadloader, torch_configs

__all__ = ["WORKLOAD", "AsyncSleepDataset", "SleepDataset"]

LATENCY_S = 0.010


class SleepDataset(Dataset[int]):
    """Item ``i`` is ``i``, after blocking for ``latency`` seconds (``time.sleep``)."""

    def __init__(self, size: int, latency: float = LATENCY_S) -> None:
        self.size = size
        self.latency = latency

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        time.sleep(self.latency)
        return index


class AsyncSleepDataset(SleepDataset):
    """The same item, after ``await asyncio.sleep(latency)``."""

    async def __getitem__(self, index: int) -> int:  # type: ignore[override]
        await asyncio.sleep(self.latency)
        return index


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    items = scale.pick(512, 128, 32)
    yield [
        Case(
            "10 ms per item",
            configs=[
                threadloader(num_workers=16),
                threadloader(num_workers=4, item_concurrency=32),
                threadloader(num_workers=4, item_concurrency=32, dataset="async"),
                *torch_configs(16),
            ],
            items=items,
            batch_size=32,
            datasets={"default": SleepDataset(items), "async": AsyncSleepDataset(items)},
            notes="Blocking: `time.sleep(0.01)`; async: `await asyncio.sleep(0.01)` with "
            "4 x 32 = 128 items in flight. torch's DataLoader cannot run an async `__getitem__`: "
            "its configurations run the blocking dataset.",
        )
    ]


WORKLOAD = Workload(
    name="remote",
    description="10 ms per item: blocking (`time.sleep`, 16 workers) and async (`asyncio.sleep`, "
    "128 in flight); 512 items, batch 32.",
    cases=_cases,
    targets=[Target("remote (async)", "10 ms per item", "ThreadLoader nw=4 ic=32 async", "speedup", 5.0)],
)
