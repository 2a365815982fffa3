"""Header: the first ``limit`` items of a stream."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from datapipes._sync import SyncIterator
from datapipes._validate import check_non_negative_int
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Header"]

T = TypeVar("T")


class Header(Node[T]):
    """Yields at most ``limit`` source items, in order, then stops without pulling more. Holds nothing."""

    def __init__(self, source: Node[T] | Iterable[T], limit: int) -> None:
        super().__init__(source)
        self.limit = check_non_negative_int("limit", limit)

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return _HeaderIterator(self, state)


class _HeaderIterator(SyncIterator[T]):
    _node: Header[T]

    def __init__(self, node: Header[T], state: StateDict | None) -> None:
        super().__init__(node, state)
        self._count = int(state.get("count", 0)) if state else 0

    def _next(self) -> T:
        if self._count >= self._node.limit:
            raise StopIteration
        item: T = self._pull()
        self._count += 1
        return item

    def state_dict(self) -> StateDict:
        return {"source": self._source.state_dict(), "count": self._count}
