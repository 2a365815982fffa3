"""Which items of an epoch a concurrent node has finished, and the state to resume from.

Items are numbered in the order they were pulled from the source (``seq``). The *frontier*
is the lowest ``seq`` not yet finished (handed to the consumer, or skipped). The resumable
state is the source's snapshot just after item ``frontier - 1`` plus the offsets of the items
past the frontier that are already finished: on resume they are pulled again and skipped, so
every item is yielded exactly once. With in-order delivery nothing past the frontier is ever
finished and the skip list stays empty.

Not thread-safe: the owning node calls it under its own lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from datapipes.base import StateDict

__all__ = ["Progress"]


class Progress:
    __slots__ = ("_done", "_frontier", "_skip", "_snapshots")

    def __init__(self, initial_snapshot: StateDict, skip: Iterable[int] = ()) -> None:
        self._snapshots: dict[int, StateDict] = {-1: initial_snapshot}
        self._frontier = 0
        self._done: set[int] = set()
        self._skip = frozenset(int(s) for s in skip)

    @property
    def frontier(self) -> int:
        return self._frontier

    def pulled(self, seq: int, snapshot: StateDict) -> bool:
        """Record the source snapshot after item ``seq``; True if ``seq`` is to be skipped (resume)."""
        self._snapshots[seq] = snapshot
        return seq in self._skip

    def finished(self, seq: int) -> None:
        """Item ``seq`` was handed to the consumer or skipped."""
        self._done.add(seq)
        snapshots, done = self._snapshots, self._done
        while self._frontier in done:
            done.discard(self._frontier)
            snapshots.pop(self._frontier - 1, None)
            self._frontier += 1

    def state(self) -> StateDict:
        frontier = self._frontier
        source: Any = self._snapshots[frontier - 1]
        return {"source": source, "skip": sorted(s - frontier for s in self._done)}
