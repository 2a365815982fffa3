"""The fixture datasets several test files share, in one place (module-level classes, so
worker processes can import them). A family's own datasets stay in its ``helpers_*.py``.

``SleepsAt``, ``StreamSleepsAt`` and ``AsyncSleepsAt`` are one dataset in three kinds
(map-style, iterable, async): ``ds[i] == i``, and item ``at`` is slow by ``seconds``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from torch.utils.data import Dataset, IterableDataset

__all__ = ["AsyncSleepsAt", "SleepsAt", "StreamSleepsAt"]


class SleepsAt(Dataset[int]):
    """``ds[i] == i``; index ``at`` sleeps ``seconds`` first."""

    def __init__(self, n: int, at: int, seconds: float) -> None:
        self.n = n
        self.at = at
        self.seconds = seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.at:
            time.sleep(self.seconds)
        return i


class AsyncSleepsAt(SleepsAt):
    """``await ds[i] == i``; index ``at`` awaits ``asyncio.sleep(seconds)`` first."""

    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        if i == self.at:
            await asyncio.sleep(self.seconds)
        return i


class StreamSleepsAt(IterableDataset[int]):
    """``range(n)`` in every worker; item ``at`` sleeps ``seconds`` first."""

    def __init__(self, n: int, at: int, seconds: float) -> None:
        self.n = n
        self.at = at
        self.seconds = seconds

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            if i == self.at:
                time.sleep(self.seconds)
            yield i
