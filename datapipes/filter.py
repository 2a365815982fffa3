"""Filter: keeps the items for which a predicate is true."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from datapipes._sync import SyncIterator
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Filter"]

T = TypeVar("T")


class Filter(Node[T]):
    """Yields, in order, the source items for which ``predicate(item)`` is true. Holds nothing.
    An exception from ``predicate`` is raised by ``next()``, the same object with a note naming
    this node and the item; that item is dropped and the next ``next()`` goes on with the
    following one. Dropped items are counted in ``stats()["skipped"]``."""

    def __init__(self, source: Node[T] | Iterable[T], predicate: Callable[[T], bool]) -> None:
        super().__init__(source)
        if not callable(predicate):
            raise TypeError(f"predicate must be callable, got {type(predicate).__name__}")
        self.predicate = predicate

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return _FilterIterator(self, state)


class _FilterIterator(SyncIterator[T]):
    _node: Filter[T]

    def _next(self) -> T:
        predicate = self._node.predicate
        while True:
            item: T = self._pull()
            try:
                keep = predicate(item)
            except Exception as exc:
                self._raise_for(exc, item)
                raise
            if keep:
                return item
            self._stats.add(skipped=1)
