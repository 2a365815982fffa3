"""The iterator base of the nodes that work in their consumer's thread (no threads of their own)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypeVar

from datapipes.base import NodeIterator, StateDict

if TYPE_CHECKING:
    from datapipes.base import Node

__all__ = ["SyncIterator"]

T = TypeVar("T")


class SyncIterator(NodeIterator[T]):
    """Pulls from its source only inside its own ``__next__``, so the source's current state
    is always the state just after the items this iterator has consumed."""

    def __init__(self, node: Node[T], state: StateDict | None) -> None:
        self._node = node
        self._stats = node._stats
        self._source: NodeIterator[Any] = node._open_source(state)
        self._closed = False

    def _pull(self) -> Any:
        start = time.perf_counter()
        item = next(self._source)
        self._stats.add(items_in=1, wait_source_s=time.perf_counter() - start)
        return item

    def _next(self) -> T:
        raise NotImplementedError

    def __next__(self) -> T:
        if self._closed:
            raise StopIteration
        item = self._next()
        self._stats.add(items_out=1)
        return item

    def state_dict(self) -> StateDict:
        return {"source": self._source.state_dict()}

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._source.close()
