"""Collator: turns each source item (a list of samples) into one batch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from torch.utils.data import default_collate

from datapipes._sync import SyncIterator
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Collator"]

T = TypeVar("T")


class Collator(Node[T]):
    """Applies ``fn`` (torch's ``default_collate`` when ``None``) to each item, in the
    consumer's thread, in order. Holds nothing. An exception from ``fn`` is raised by
    ``next()`` for that item, the same object with a note naming this node and the item;
    the next ``next()`` goes on with the following item."""

    def __init__(self, source: Node[Any] | Iterable[Any], fn: Callable[[Any], T] | None = None) -> None:
        super().__init__(source)
        if fn is not None and not callable(fn):
            raise TypeError(f"fn must be a callable or None (default_collate), got {type(fn).__name__}")
        self.fn: Callable[[Any], T] = default_collate if fn is None else fn

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return _CollatorIterator(self, state)


class _CollatorIterator(SyncIterator[T]):
    _node: Collator[T]

    def _next(self) -> T:
        item = self._pull()
        start = time.perf_counter()
        try:
            return self._node.fn(item)
        except Exception as exc:
            self._raise_for(exc, item)
            raise
        finally:
            self._stats.add(busy_s=time.perf_counter() - start)
