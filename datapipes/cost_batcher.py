"""CostBatcher: batches cut by a cost budget, not a count, from a stream in its order."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from datapipes._sync import SyncIterator
from datapipes._validate import check_choice, check_positive_int
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["COST_MODES", "CostBatcher", "CostCut", "batch_cost"]

T = TypeVar("T")

#: How a batch's cost is counted: ``"sum"`` (packed: the samples' costs added) or ``"padded"``
#: (the number of samples times the largest cost, as a batch padded to its longest sample).
COST_MODES = ("sum", "padded")


def batch_cost(costs: Sequence[int], mode: str) -> int:
    """The cost of a batch of samples of ``costs`` counted by ``mode`` (see :data:`COST_MODES`)."""
    if not costs:
        return 0
    return sum(costs) if mode == "sum" else len(costs) * max(costs)


class CostBatcher(Node[list[T]]):
    """Yields lists of consecutive items of ``source`` whose cost fits ``max_cost``: each list
    takes items in order until the next one would pass the budget (``mode``: see
    :data:`COST_MODES`), or ``batch_size`` items. An item over the budget alone is a list of one,
    and ``on_over(item, cost)`` is told of it. ``cost(item)`` is called once per item, in this
    node's thread; it must return a non-negative int.

    ``group_window``: the items are taken in windows of ``group_window`` positions of the
    source's order (``key(item)``: an item's position; the count of items pulled without it),
    and within a window sorted by cost (a stable sort: equal costs keep their order) before the
    lists are cut, so samples of like cost share a list; a list may span two windows. Windows
    are by position, so a source resumed past some items groups the rest as it did.

    ``agree(k)``: given the size this node would cut, returns the size to cut (``1 <= size <=
    k``; 0 ends the stream): several streams cut in step (one per DDP rank, an ``all_reduce``
    with ``MIN``) call it once per list, in their consumer's thread. A stream with no items left
    offers 0; one given 0 while it still holds items raises ``RuntimeError`` (the streams were of
    different lengths).

    Bounded: holds the items of at most one window being sorted, plus the sorted items not yet
    cut (fewer than a window plus a list). An exception from the source (or ``cost``) is raised
    by ``next()``; the items held stay for the next ``next()`` (an item whose ``cost`` raised is
    not batched: the error stands for it). State: the source's and the items
    held (as they are).
    """

    def __init__(
        self,
        source: Node[T] | Any,
        max_cost: int,
        cost: Callable[[T], int],
        *,
        batch_size: int | None = None,
        mode: str = "sum",
        group_window: int | None = None,
        key: Callable[[T], int] | None = None,
        agree: Callable[[int], int] | None = None,
        on_over: Callable[[T, int], None] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(source, name=name)
        self.max_cost = check_positive_int("max_cost", max_cost)
        if not callable(cost):
            raise TypeError(f"cost must be a callable (item -> int), got {cost!r}")
        self.cost = cost
        self.batch_size = None if batch_size is None else check_positive_int("batch_size", batch_size)
        self.mode = check_choice("mode", mode, COST_MODES)
        self.group_window = None if group_window is None else check_positive_int("group_window", group_window)
        self.key = key
        self.agree = agree
        self.on_over = on_over

    def _open(self, state: StateDict | None) -> NodeIterator[list[T]]:
        return _CostIterator(self, state)


class _CostIterator(SyncIterator[list[T]]):
    _node: CostBatcher[T]

    def __init__(self, node: CostBatcher[T], state: StateDict | None) -> None:
        super().__init__(node, state)
        self._cut = CostCut(
            self._pull,
            node.max_cost,
            node.cost,
            batch_size=node.batch_size,
            mode=node.mode,
            group_window=node.group_window,
            key=node.key,
            agree=node.agree,
            on_over=node.on_over,
            held=state.get("held") if state else None,
        )

    def _next(self) -> list[T]:
        return self._cut.next_list()

    def state_dict(self) -> StateDict:
        return {"source": self._source.state_dict(), "held": self._cut.held_state()}


class CostCut(Generic[T]):
    """The cut a :class:`CostBatcher` makes (see it for ``max_cost`` ... ``on_over``), over
    ``pull()``, which gives the next item or raises ``StopIteration`` at the end: what the
    node's iterator and a loader's ``IterableDataset`` worker (which cuts its own stream) share.
    ``held``: the items held, as :meth:`held_state` gave them. Owned by one thread."""

    def __init__(
        self,
        pull: Callable[[], T],
        max_cost: int,
        cost: Callable[[T], int],
        *,
        batch_size: int | None = None,
        mode: str = "sum",
        group_window: int | None = None,
        key: Callable[[T], int] | None = None,
        agree: Callable[[int], int] | None = None,
        on_over: Callable[[T, int], None] | None = None,
        held: StateDict | None = None,
    ) -> None:
        self._pull = pull
        self.max_cost, self.cost, self.batch_size, self.mode = max_cost, cost, batch_size, mode
        self.group_window, self.key, self.agree, self.on_over = group_window, key, agree, on_over
        held = held or {}
        # Sorted (or, without windows, in order) and costed: the next lists are cut from these.
        self._ready: deque[tuple[T, int]] = deque((item, int(c)) for item, c in held.get("ready", ()))
        # The window being gathered (before its sort), and its number.
        self._window: list[tuple[T, int]] = [(item, int(c)) for item, c in held.get("window", ())]
        self._window_id: int | None = held.get("window_id")
        self._count = int(held.get("count", 0))  # items pulled, for windows without a key
        self.source_ended = False

    def head(self) -> T | None:
        """The item the next list starts with, as far as the items held say (None: none held)."""
        if self._ready:
            return self._ready[0][0]
        return min(self._window, key=_by_cost)[0] if self._window else None

    def drop(self, count: int) -> None:
        """Take ``count`` items off the front of the order, uncut (a resume replaying the
        order past the ones delivered); fewer where the source ends first."""
        self._fill(count)
        for _ in range(min(count, len(self._ready))):
            self._ready.popleft()

    def _window_of(self, item: T) -> int:
        assert self.group_window is not None
        position = self.key(item) if self.key is not None else self._count
        return position // self.group_window

    def _take_one(self) -> bool:
        """Pull one item into the held ones; False at the source's end (the window flushed)."""
        if self.source_ended:
            return False
        try:
            item = self._pull()
        except StopIteration:
            self.source_ended = True
            self._flush()
            return False
        self._count += 1
        cost = self.cost(item)
        if self.group_window is None:
            self._ready.append((item, cost))
            return True
        window = self._window_of(item)
        if self._window and window != self._window_id:
            self._flush()
        self._window_id = window
        self._window.append((item, cost))
        return True

    def _flush(self) -> None:
        """The window gathered, sorted by cost (stable), joins the ready items."""
        self._ready.extend(sorted(self._window, key=_by_cost))
        self._window = []

    def _fill(self, need: int) -> None:
        """Pull until ``need`` items are ready, or the source ended."""
        while len(self._ready) < need and self._take_one():
            pass

    def _fits(self) -> int:
        """How many of the ready items the next list takes (pulling as many as that needs)."""
        taken, total, widest = 0, 0, 0
        while self.batch_size is None or taken < self.batch_size:
            self._fill(taken + 1)
            if len(self._ready) <= taken:
                break
            cost = self._ready[taken][1]
            total, widest = total + cost, max(widest, cost)
            if taken and (total if self.mode == "sum" else (taken + 1) * widest) > self.max_cost:
                break
            taken += 1
        return taken

    def next_list(self) -> list[T]:
        """The next list cut; ``StopIteration`` once the source ended and nothing is held."""
        size = self._fits()
        if self.agree is not None:
            agreed = self.agree(size)
            if agreed > size or agreed < 0:
                raise RuntimeError(f"agree({size}) returned {agreed}: it must be between 0 and {size}")
            if agreed == 0 and size:
                raise RuntimeError(
                    f"another stream cutting in step has ended while this one holds {len(self._ready)} items or "
                    "more: the streams must have as many items (a DistributedSampler gives every rank as many)"
                )
            size = agreed
        if size == 0:
            raise StopIteration
        taken = [self._ready.popleft() for _ in range(size)]
        if size == 1 and taken[0][1] > self.max_cost and self.on_over is not None:
            try:
                self.on_over(taken[0][0], taken[0][1])
            except BaseException:  # its warning made an error: the sample stays, for the next call
                self._ready.appendleft(taken[0])
                raise
        return [item for item, _ in taken]

    def held_state(self) -> StateDict:
        """The items held, as they are (and the window's number and count)."""
        return {
            "ready": [[item, cost] for item, cost in self._ready],
            "window": [[item, cost] for item, cost in self._window],
            "window_id": self._window_id,
            "count": self._count,
        }


def _by_cost(pair: tuple[Any, int]) -> int:
    return pair[1]
