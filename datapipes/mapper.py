"""Mapper: applies a function to each item in the consumer's thread."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT
from datapipes.base import Node, NodeIterator, StateDict, add_item_note

__all__ = ["Mapper"]

T = TypeVar("T")
U = TypeVar("U")


class Mapper(Node[U]):
    """Yields ``fn(item)`` for each source item, computed inside ``next()`` in the consumer's
    thread: no thread, no buffer, the least work per item of any node (what a loader with
    ``num_workers=0`` runs).

    Order is the source's. An exception from ``fn`` is raised by ``next()`` for its item, the
    same object with a note naming this node and the item; the next ``next()`` goes on with
    the following item. ``stats()`` counts the items handed out when the epoch ends.
    """

    def __init__(self, source: Node[Any] | Iterable[Any], fn: Callable[[Any], U], *, name: str | None = None) -> None:
        super().__init__(source, name=name)
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn

    def _open(self, state: StateDict | None) -> NodeIterator[U]:
        return _MapperIterator(self, state)


class _MapperIterator(NodeIterator[U]):
    __slots__ = ("_closed", "_fn", "_node", "_out", "_source")

    def __init__(self, node: Mapper[U], state: StateDict | None) -> None:
        self._node = node
        self._fn = node.fn
        self._source: NodeIterator[Any] = node._open_source(state)
        self._closed = False
        self._out = 0  # items handed out; owned by the consumer's thread

    def __next__(self) -> U:
        if self._closed:
            raise StopIteration
        try:
            item = next(self._source)
        except StopIteration:
            self.close()
            raise
        self._out += 1
        try:
            return self._fn(item)
        except BaseException as exc:
            add_item_note(exc, self._node.name, self._out - 1, item)
            raise

    def state_dict(self) -> StateDict:
        return {"source": self._source.state_dict()}

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> None:
        if not self._closed:
            self._closed = True
            self._node._stats.add(items_in=self._out, items_out=self._out)
            self._out = 0
            self._source.shutdown(timeout, warn=warn)
