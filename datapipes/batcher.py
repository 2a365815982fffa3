"""Batcher: cuts a stream into lists of ``batch_size`` items."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from datapipes._sync import SyncIterator
from datapipes._validate import check_positive_int
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Batcher"]

T = TypeVar("T")


class Batcher(Node[list[T]]):
    """Yields lists of ``batch_size`` consecutive source items, in source order.

    The last list is shorter unless ``drop_last=True``, which drops it. Holds at most one
    partial batch. If the source raises mid-batch the exception propagates and the items
    gathered so far stay in the partial batch, which the next ``next()`` goes on filling.
    """

    def __init__(self, source: Node[T] | Iterable[T], batch_size: int, *, drop_last: bool = False) -> None:
        super().__init__(source)
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.drop_last = bool(drop_last)

    def _open(self, state: StateDict | None) -> NodeIterator[list[T]]:
        return _BatcherIterator(self, state)


class _BatcherIterator(SyncIterator[list[T]]):
    _node: Batcher[T]

    def __init__(self, node: Batcher[T], state: StateDict | None) -> None:
        super().__init__(node, state)
        self._partial: list[Any] = list(state.get("partial", ())) if state else []

    def _next(self) -> list[T]:
        size = self._node.batch_size
        partial = self._partial
        try:
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
