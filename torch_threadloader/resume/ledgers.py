"""Ledgers of the batches an epoch delivered, one per kind of progress.

* :class:`PositionLedger`: which positions of a map-style (or async) epoch's order were
  delivered: every one below ``frontier``, and ``done`` (ranges) above it.
* :class:`SampleLedger`: the same, by sample (``defer_stragglers=True``): each batch
  delivers the positions of its samples, in the order they finished.
* :class:`IterableLedger`: per worker of an ``IterableDataset``, the batches it delivered and
  its copy's own state after its last one, and whose turn is next.
* :class:`NodeLedger`: a ``datapipes`` graph's state after the last batch delivered.

Each remembers its :data:`RECENT` deliveries, so ``state(held)`` gives the state as it was
before the batches a consumer holds fetched but not used (Lightning's fetcher holds one). A
ledger is owned by the epoch's consumer thread; the epoch's record reads it under its lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import NotRequired, TypedDict

import datapipes as dp
from datapipes._progress import Frontier, encode_ranges
from torch_threadloader.resume.data import OwnState
from torch_threadloader.tags import GraphTag, WorkerTag

__all__ = [
    "RECENT",
    "GraphProgress",
    "IterableLedger",
    "NodeLedger",
    "DeliveredPositions",
    "PositionLedger",
    "SampleLedger",
    "StreamsProgress",
    "WorkerProgress",
]

#: How many recent deliveries a ledger remembers, to give the state as it was before the
#: batches a consumer holds fetched but not used (Lightning's fetcher holds one).
RECENT = 8


class DeliveredPositions(TypedDict):
    """The positions delivered: every one below ``frontier``, and ``done`` (``[start, stop)`` ranges) above it."""

    frontier: int
    done: list[list[int]]


class WorkerProgress(TypedDict):
    """One ``IterableDataset`` worker's part of a state."""

    batches: int
    state: OwnState
    ended: bool
    items: NotRequired[int]


class StreamsProgress(TypedDict):
    """An ``IterableDataset`` epoch's workers, whose turn is next, and whether all ended."""

    workers: list[WorkerProgress]
    turn: int
    all_ended: bool


class GraphProgress(TypedDict):
    """A ``datapipes`` graph's state after the last batch delivered, and whether it had ended."""

    graph: dp.StateDict
    all_ended: bool


class PositionLedger:
    """Which positions of a map-style epoch's order were delivered (a :class:`~datapipes._progress.Frontier`)."""

    def __init__(self, frontier: int = 0, done: Iterable[Iterable[int]] = ()) -> None:
        self.delivered = Frontier.from_ranges(frontier, done)
        self.delivered.absorb()
        # Delivered before this epoch (by the run this one resumes): never "held" by a consumer.
        self.before = (self.delivered.frontier, frozenset(self.delivered.above))
        self.recent: deque[int] = deque(maxlen=RECENT)

    @property
    def frontier(self) -> int:
        """The lowest position not yet delivered."""
        return self.delivered.frontier

    def add(self, position: int) -> None:
        self.delivered.add(position)
        self.recent.append(position)

    def set_in_order(self, frontier: int, skip: Iterable[Iterable[int]]) -> None:
        """From a sampler's own state (``yielded``, ``skip``): a consumer without positions."""
        self.delivered = Frontier.from_ranges(frontier, skip)

    def state(self, held: int = 0) -> DeliveredPositions:
        frontier, extra = self.delivered.frontier, set(self.delivered.above)
        if held:
            for position in self._last(held, frontier, extra):
                if position >= frontier:
                    extra.discard(position)
                else:
                    extra.update(range(position + 1, frontier))
                    frontier = position
        return {"frontier": frontier, "done": encode_ranges(extra)}

    def _last(self, held: int, frontier: int, extra: set[int]) -> list[int]:
        if self.recent:
            return list(self.recent)[-held:]
        # In-order consumer without positions: the last ``held`` delivered below the frontier.
        before_frontier, before_extra = self.before
        out: list[int] = []
        p = frontier - 1
        while len(out) < held and p >= 0 and not (p < before_frontier or p in before_extra):
            out.append(p)
            p -= 1
        return out[::-1]


class SampleLedger(PositionLedger):
    """Which sample positions of an epoch's order were delivered (``defer_stragglers=True``):
    a batch's tag is the tuple of its samples' positions (a failed sample's, its own; an int
    is one position). ``done`` stays within the epoch's window past ``frontier``."""

    def __init__(self, frontier: int = 0, done: Iterable[Iterable[int]] = ()) -> None:
        super().__init__(frontier, done)
        self.batches: deque[tuple[int, ...]] = deque(maxlen=RECENT)

    def add(self, position: int | Sequence[int]) -> None:
        positions = (position,) if isinstance(position, int) else tuple(position)
        for p in positions:
            self.delivered.add(p)
        self.batches.append(positions)

    def state(self, held: int = 0) -> DeliveredPositions:
        delivered = self.delivered
        if not held or not self.batches:
            return {"frontier": delivered.frontier, "done": delivered.ranges()}
        undelivered = {p for batch in list(self.batches)[-held:] for p in batch}
        frontier = min(delivered.frontier, min(undelivered))
        before = Frontier(frontier, (delivered.above | set(range(frontier, delivered.frontier))) - undelivered)
        before.absorb()
        return {"frontier": before.frontier, "done": before.ranges()}


class IterableLedger:
    """Per worker of an IterableDataset epoch: batches delivered, and the dataset copy's state
    after its last one (``None`` for a dataset without ``state_dict``)."""

    def __init__(
        self, num_workers: int, state: dp.StateDict | None = None, start: Sequence[OwnState] | None = None
    ) -> None:
        workers = list(state["workers"]) if state else [{} for _ in range(num_workers)]
        self.batches = [int(w.get("batches", 0)) for w in workers]
        self.states: list[OwnState] = [w.get("state") for w in workers]
        if state is None and start is not None:  # the copies' own states as the epoch starts
            self.states = [start[w] if w < len(start) else None for w in range(num_workers)]
        self.ended = [bool(w.get("ended", False)) for w in workers]
        # Items each worker read (a dataset without state of its own is resumed by reading
        # them again; a failed batch read fewer than batch_size), when counted.
        self.items: list[int | None] = [w.get("items") for w in workers]
        self.turn = int(state.get("turn", 0)) if state else 0
        self.recent: deque[tuple[int, OwnState, bool, int | None]] = deque(maxlen=RECENT)

    def add(self, tag: WorkerTag) -> None:
        worker, state, ended = tag[0], tag[1], tag[2]
        self.recent.append((worker, self.states[worker], self.ended[worker], self.items[worker]))
        self.batches[worker] += 1
        self.states[worker] = state
        self.ended[worker] = ended
        if len(tag) > 3:
            self.items[worker] = tag[3]
        self.turn = (worker + 1) % len(self.batches)

    def state(self, held: int = 0) -> StreamsProgress:
        batches, states, ended, items = list(self.batches), list(self.states), list(self.ended), list(self.items)
        turn = self.turn
        for worker, before, was_ended, read in list(self.recent)[::-1][:held]:
            batches[worker] -= 1
            states[worker] = before
            ended[worker] = was_ended
            items[worker] = read
            turn = worker
        workers: list[WorkerProgress] = []
        for b, st, e, n in zip(batches, states, ended, items, strict=True):
            entry: WorkerProgress = {"batches": b, "state": st, "ended": e}
            if n is not None:
                entry["items"] = n
            workers.append(entry)
        return {"workers": workers, "turn": turn, "all_ended": all(ended)}


class NodeLedger:
    """A ``datapipes`` graph's state after the last batch delivered, and whether the graph
    ended while that batch was made."""

    def __init__(self, state: dp.StateDict) -> None:
        self.last: GraphTag = (state, False)
        self.recent: deque[GraphTag] = deque(maxlen=RECENT)

    def add(self, tag: GraphTag) -> None:
        self.recent.append(self.last)
        self.last = tag

    def state(self, held: int = 0) -> GraphProgress:
        last = self.last
        if held:
            recent = list(self.recent)
            last = recent[-held] if held <= len(recent) else recent[0]
        return {"graph": last[0], "all_ended": last[1]}
