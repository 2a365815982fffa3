"""IterableWrapper: a node over any re-iterable Python iterable."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["IterableWrapper"]

T = TypeVar("T")


class IterableWrapper(Node[T]):
    """Yields the items of ``iterable``; each epoch calls ``iter(iterable)`` again.

    Holds nothing. Resuming calls ``iter(iterable)`` and skips the items already yielded, so
    it is exact when the iterable yields the same items each time it is iterated (a list, a
    range, a deterministic dataset). Other nodes wrap plain iterables in it automatically.
    """

    def __init__(self, iterable: Iterable[T], *, name: str | None = None) -> None:
        super().__init__(None, name=name)
        self.iterable = iterable

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return _WrapperIterator(self, 0 if state is None else int(state.get("yielded", 0)))

    def __repr__(self) -> str:
        return f"{self.name}({type(self.iterable).__name__})"


class _WrapperIterator(NodeIterator[T]):
    def __init__(self, node: IterableWrapper[T], skip: int) -> None:
        self._stats = node._stats
        self._it: Iterator[T] | None = iter(node.iterable)
        self._yielded = 0
        for _ in range(skip):
            if next(self._it, _MISSING) is _MISSING:
                break
            self._yielded += 1

    def __next__(self) -> T:
        it = self._it  # read once: close() may set it to None from another thread
        if it is None:
            raise StopIteration
        try:
            item = next(it)
        except StopIteration:
            self._it = None
            raise
        self._yielded += 1
        self._stats.add(items_in=1, items_out=1)
        return item

    def state_dict(self) -> StateDict:
        return {"yielded": self._yielded}

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """Close the wrapped iterator, within ``timeout`` when it takes one (a node's epoch)."""
        it = self._it
        shutdown = getattr(it, "shutdown", None)
        stopped = True
        if shutdown is not None:
            stopped = shutdown(timeout, warn=warn) is not False
        else:
            close = getattr(it, "close", None)
            if close is not None:
                close()  # a generator running in another thread refuses; the caller retries
        self._it = None
        return stopped

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()  # a generator running in another thread refuses; the caller retries
        self._it = None


_MISSING = object()
