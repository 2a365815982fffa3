"""Unbatcher: flattens a stream of sequences into a stream of their items."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from datapipes._sync import SyncIterator
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Unbatcher"]

T = TypeVar("T")


class Unbatcher(Node[T]):
    """Yields the items of each source sequence in order. Holds one source sequence."""

    def __init__(self, source: Node[Sequence[T]] | Iterable[Sequence[T]]) -> None:
        super().__init__(source)

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return _UnbatcherIterator(self, state)


class _UnbatcherIterator(SyncIterator[T]):
    def __init__(self, node: Unbatcher[T], state: StateDict | None) -> None:
        super().__init__(node, state)
        self._batch: Sequence[Any] = list(state.get("batch", ())) if state else []
        self._offset = int(state.get("offset", 0)) if state else 0

    def _next(self) -> T:
        while self._offset >= len(self._batch):
            self._batch = self._pull()
            self._offset = 0
        item: T = self._batch[self._offset]
        self._offset += 1
        return item

    def state_dict(self) -> StateDict:
        rest = list(self._batch[self._offset :])
        return {"source": self._source.state_dict(), "batch": rest, "offset": 0}
