"""Which items of an epoch are finished, and the state a concurrent node resumes from.

:class:`Frontier` is the one record of positions finished: every position below ``frontier``,
and the set ``above`` past it. A node's :class:`Progress` keeps one over the order its items
were pulled in; the loader's ledgers (``torch_threadloader.resume.ledgers``) keep one over the
positions of the epoch's order delivered to the user.

A node's items are numbered in the order they were pulled from the source (``seq``). The
resumable state is the source's snapshot just after item ``frontier - 1`` plus the offsets of
the items past the frontier that are already finished: on resume they are pulled again and
skipped, so every item is yielded exactly once. With in-order delivery nothing past the
frontier is ever finished and the skip list stays empty.

Not thread-safe: the owner calls them under its own lock (or from its one thread).
"""

from __future__ import annotations

from collections.abc import Iterable

from datapipes.base import StateDict

__all__ = ["Frontier", "Progress", "encode_ranges"]


def encode_ranges(positions: Iterable[int]) -> list[list[int]]:
    """Sorted positions as ``[[start, stop), ...]``: a run of consecutive ones costs one pair."""
    out: list[list[int]] = []
    for p in sorted(positions):
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        else:
            out.append([p, p + 1])
    return out


class Frontier:
    """Positions finished: every one below ``frontier``, and ``above`` (past it)."""

    __slots__ = ("above", "frontier")

    def __init__(self, frontier: int = 0, above: Iterable[int] = ()) -> None:
        self.frontier = frontier
        self.above: set[int] = set(above)

    @classmethod
    def from_ranges(cls, frontier: int, ranges: Iterable[Iterable[int]]) -> Frontier:
        """From ``frontier`` and ``[start, stop)`` ranges past it (:meth:`ranges`)."""
        above: set[int] = set()
        for start, stop in ranges:
            above.update(range(int(start), int(stop)))
        return cls(int(frontier), above)

    def add(self, position: int) -> None:
        """``position`` is finished; the frontier passes every finished run it reaches."""
        if position == self.frontier:
            self.frontier += 1
            if self.above:
                self.absorb()
        else:
            self.above.add(position)

    def absorb(self) -> None:
        """Move the frontier past the finished positions it reaches."""
        above = self.above
        while self.frontier in above:
            above.discard(self.frontier)
            self.frontier += 1

    def ranges(self) -> list[list[int]]:
        """The positions finished past the frontier, as ``[start, stop)`` ranges."""
        return encode_ranges(self.above)


class Progress:
    """A concurrent node's items finished, by ``seq``, and the source's snapshots they need."""

    __slots__ = ("_done", "_skip", "_snapshots")

    def __init__(self, initial_snapshot: StateDict, skip: Iterable[int] = ()) -> None:
        self._snapshots: dict[int, StateDict] = {-1: initial_snapshot}
        self._done = Frontier()
        self._skip = frozenset(int(s) for s in skip)

    @property
    def frontier(self) -> int:
        return self._done.frontier

    def pulled(self, seq: int, snapshot: StateDict) -> bool:
        """Record the source snapshot after item ``seq``; True if ``seq`` is to be skipped (resume)."""
        self._snapshots[seq] = snapshot
        return seq in self._skip

    def finished(self, seq: int) -> None:
        """Item ``seq`` was handed to the consumer or skipped."""
        before = self._done.frontier
        self._done.add(seq)
        snapshots = self._snapshots
        for passed in range(before - 1, self._done.frontier - 1):
            snapshots.pop(passed, None)

    def state(self) -> StateDict:
        frontier = self._done.frontier
        return {"source": self._snapshots[frontier - 1], "skip": sorted(s - frontier for s in self._done.above)}
