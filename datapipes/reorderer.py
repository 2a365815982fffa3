"""Reorderer: restores sequence order of items that arrive out of order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from datapipes._sync import SyncIterator
from datapipes._validate import check_positive_int
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Reorderer"]

T = TypeVar("T")


class Reorderer(Node[T]):
    """Yields source items in increasing ``key(item)`` order: ``start``, ``start + 1``, ...

    Bounded by a ring of ``window`` slots: an item whose key is ``window`` or more ahead of
    the next expected key raises ``ValueError`` (the producer ran further ahead than the
    window allows), as does a duplicate or already-yielded key, or a source that ends while a
    key is missing. Nothing is dropped silently. ``key`` defaults to ``item[0]``, so
    ``(seq, value)`` pairs work as they are.
    """

    def __init__(
        self,
        source: Node[T] | Iterable[T],
        window: int,
        *,
        key: Callable[[T], int] | None = None,
        start: int = 0,
    ) -> None:
        super().__init__(source)
        self.window = check_positive_int("window", window)
        self.key: Callable[[T], int] = _first_element if key is None else key
        self.start = int(start)

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return _ReordererIterator(self, state)


def _first_element(item: Any) -> int:
    return int(item[0])


class _ReordererIterator(SyncIterator[T]):
    _node: Reorderer[T]

    def __init__(self, node: Reorderer[T], state: StateDict | None) -> None:
        super().__init__(node, state)
        self._next_key = int(state["next_key"]) if state else node.start
        self._held: dict[int, Any] = {int(k): v for k, v in state["held"]} if state else {}

    def _next(self) -> T:
        held = self._held
        while self._next_key not in held:
            try:
                item = self._pull()
            except StopIteration:
                if held:
                    raise ValueError(
                        f"Reorderer: source ended while key {self._next_key} was missing; holding keys {sorted(held)}"
                    ) from None
                raise
            key = self._node.key(item)
            if key < self._next_key or key in held:
                raise ValueError(f"Reorderer: key {key} arrived twice or after it was yielded")
            if key >= self._next_key + self._node.window:
                raise ValueError(
                    f"Reorderer: key {key} is {key - self._next_key} ahead of the next expected key "
                    f"{self._next_key}, beyond window={self._node.window}"
                )
            held[key] = item
            self._stats.peak(len(held))
        ready: T = held.pop(self._next_key)
        self._next_key += 1
        return ready

    def state_dict(self) -> StateDict:
        return {"source": self._source.state_dict(), "next_key": self._next_key, "held": list(self._held.items())}
