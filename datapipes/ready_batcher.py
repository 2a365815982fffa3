"""ReadyBatcher: batches of the items that finish first, within a bounded window of the source's order."""

from __future__ import annotations

from typing import Any, TypeVar

from datapipes._lifecycle import call_deadline
from datapipes._sync import SyncIterator
from datapipes._validate import check_positive_int
from datapipes.async_fetcher import AsyncFetcher
from datapipes.base import Node, NodeIterator, StateDict
from datapipes.thread_mapper import OUT_OF_ORDER_LEAD, ThreadMapper

__all__ = ["ReadyBatcher"]

T = TypeVar("T")


class ReadyBatcher(Node[list[T]]):
    """Yields lists of the first ``batch_size`` items of ``source`` to finish: a slow item
    goes into a later list instead of holding up its own.

    ``source`` is a :class:`~datapipes.ThreadMapper` or :class:`~datapipes.AsyncFetcher`
    with ``in_order=False`` (it yields in completion order). Window: while the oldest item
    (in the source's order) not yet in a list this node yielded is item ``f``, no item at
    or past ``f + window`` is started (errors aside: each one the source raises lets one
    more item start); so every item ends up in a list, however slow, and a
    checkpoint (the source's state: its position and the items past it already finished)
    stays bounded. The node sets the source's ``max_lead`` to ``window - capacity -
    batch_size + 1`` for that (``capacity``: the most items the source holds at once), so
    ``window`` must be at least ``capacity + batch_size`` (:meth:`min_window`); None takes
    :meth:`default_window`.

    Every item exactly once; every list has ``batch_size`` items but the last, which is
    shorter, or dropped with ``drop_last=True``. Holds at most one partial list. An
    exception from the source is raised by ``next()`` at its place, and the items gathered
    so far stay in the partial list, which the next ``next()`` goes on filling. The source's
    ``timeout`` bounds one ``next()`` (its pulls share one deadline), not each pull. State: the
    source's, and the partial list's items (as they are).
    """

    source: ThreadMapper[Any] | AsyncFetcher[Any]

    @staticmethod
    def min_window(capacity: int, batch_size: int) -> int:
        """The smallest window a source of ``capacity`` items allows batches of ``batch_size``
        within: ``capacity + batch_size``."""
        return capacity + batch_size

    @staticmethod
    def default_window(capacity: int, batch_size: int) -> int:
        """The window when none is given: the source's own default lead (``OUT_OF_ORDER_LEAD``
        times its capacity) plus what the bound needs (``capacity + batch_size - 1``)."""
        return OUT_OF_ORDER_LEAD * capacity + capacity + batch_size - 1

    def __init__(
        self,
        source: ThreadMapper[T] | AsyncFetcher[T],
        batch_size: int,
        *,
        window: int | None = None,
        drop_last: bool = False,
        name: str | None = None,
    ) -> None:
        if not isinstance(source, ThreadMapper | AsyncFetcher):
            raise TypeError(
                f"ReadyBatcher's source must be a ThreadMapper or an AsyncFetcher, got {type(source).__name__}"
            )
        if source.in_order:
            raise ValueError(
                "ReadyBatcher needs a source with in_order=False: it batches items as they finish, and an "
                "in-order source holds every item back behind the slowest one"
            )
        super().__init__(source, name=name)
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.drop_last = bool(drop_last)
        capacity = source.capacity
        least = self.min_window(capacity, self.batch_size)
        if window is None:
            window = self.default_window(capacity, self.batch_size)
        elif isinstance(window, bool) or not isinstance(window, int) or window < least:
            raise ValueError(
                f"window must be an int >= {least} (the source holds up to {capacity} items, and a batch "
                f"is {self.batch_size}), got {window!r}"
            )
        self.window = window
        source.max_lead = window - capacity - self.batch_size + 1

    def _open(self, state: StateDict | None) -> NodeIterator[list[T]]:
        return _ReadyIterator(self, state)


class _ReadyIterator(SyncIterator[list[T]]):
    _node: ReadyBatcher[T]

    def __init__(self, node: ReadyBatcher[T], state: StateDict | None) -> None:
        super().__init__(node, state)
        self._partial: list[Any] = list(state.get("partial", ())) if state else []

    def _next(self) -> list[T]:
        size = self._node.batch_size
        partial = self._partial
        try:
            with call_deadline(self._node.source.timeout):  # the source's timeout bounds this next()
                while len(partial) < size:
                    partial.append(self._pull())
        except StopIteration:
            if not partial or self._node.drop_last:
                partial.clear()
                raise
        self._partial = []
        return partial

    def state_dict(self) -> StateDict:
        return {"source": self._source.state_dict(), "partial": list(self._partial)}
