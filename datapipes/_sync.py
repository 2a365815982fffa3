"""The iterator base of the nodes that work in their consumer's thread (no threads of their own)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT
from datapipes.base import NodeIterator, StateDict, add_item_note

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
        self._closed = False  # next() ends
        self._source_closed = False  # the source's shutdown() returned (it may refuse: see shutdown)
        self._pulled = 0  # items pulled from the source this epoch (for error notes)

    def _pull(self) -> Any:
        start = time.perf_counter()
        item = next(self._source)
        self._stats.add(items_in=1, wait_source_s=time.perf_counter() - start)
        self._pulled += 1
        return item

    def _raise_for(self, exc: BaseException, item: object) -> None:
        """Count a user function's ``exc`` for the item pulled last and note it there."""
        self._stats.add(errors=1)
        add_item_note(exc, self._node.name, self._pulled - 1, item)

    def _next(self) -> T:
        raise NotImplementedError

    def __next__(self) -> T:
        if self._closed:
            raise StopIteration
        try:
            item = self._next()
        except StopIteration:
            # The end of this node's stream (not always its source's: a Header stops early)
            # ends the epoch of every node upstream, threads included.
            self.close()
            raise
        self._stats.add(items_out=1)
        return item

    def state_dict(self) -> StateDict:
        return {"source": self._source.state_dict()}

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """End ``next()`` and close the source. A generator source that another thread is
        inside refuses (``ValueError``, passed on): a later call closes it again."""
        self._closed = True
        if self._source_closed:
            return True
        stopped = self._source.shutdown(timeout, warn=warn)
        self._source_closed = True
        return stopped
