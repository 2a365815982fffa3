"""Mapper: applies a function to each item in the consumer's thread."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT
from datapipes.base import Node, NodeIterator, StateDict, add_item_note
from datapipes.sampler import _SamplerIterator

__all__ = ["Mapper", "MapperIterator"]

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
        return MapperIterator(self, state)


class MapperIterator(NodeIterator[U]):
    """One epoch of a :class:`Mapper`: ``fn`` over the source's items, in ``next()``."""

    def __init__(self, node: Mapper[U], state: StateDict | None) -> None:
        self._node = node
        self._fn = node.fn
        self._source: NodeIterator[Any] = node._open_source(state)
        # Over a Sampler, map() pulls the sampler's own iterator in C, and this iterator keeps
        # the sampler's count: one Python call per item instead of two (num_workers=0's loop).
        self._sampler = self._source if isinstance(self._source, _SamplerIterator) else None
        self._mapped: Iterator[U] | None = None  # made at the first next(): the sampler draws then
        self._base = 0  # the sampler's count when map() took over
        # Items taken from the source (each gives a value or an error); a consumer that pulls
        # raw() itself adds each one here.
        self.pulled = 0
        self._closed = False

    def __next__(self) -> U:
        mapped = self._mapped
        if mapped is None:
            if self._closed:
                raise StopIteration
            mapped = self._mapped = self._start()
        try:
            value = next(mapped)
        except StopIteration:
            self.close()
            raise
        except KeyboardInterrupt:  # not the item's outcome: it is loaded again on resume
            raise
        except BaseException as exc:
            self.failed(exc)
            raise
        self.pulled += 1
        return value

    def raw(self) -> Iterator[U]:
        """The ``map()`` this iterator pulls, for a consumer in the same thread that calls it
        directly (no call of this ``__next__`` per item): the consumer adds 1 to
        :attr:`pulled` for each value it takes, calls :meth:`failed` for an exception and
        ``close()`` at the end."""
        mapped = self._mapped
        if mapped is None:
            mapped = self._mapped = iter(()) if self._closed else self._start()
        return mapped

    def failed(self, exc: BaseException) -> None:
        """The item just taken raised ``exc``: count it and, when ``fn`` raised it (not the
        source, whose error is its own, noted where it was raised), name it in a note."""
        self.pulled += 1
        if not _raised_by(exc, self._source):
            add_item_note(exc, self._node.name, self.pulled - 1, "(see the traceback)")

    def _start(self) -> Iterator[U]:
        raw = self._sampler.raw() if self._sampler is not None else None
        if raw is None:
            self._sampler = None
            return map(self._fn, self._source)
        indices, self._base = raw
        return map(self._fn, indices)

    def _sync(self) -> None:
        if self._sampler is not None and self._mapped is not None:
            self._sampler.consumed(self._base + self.pulled)

    def state_dict(self) -> StateDict:
        self._sync()
        return {"source": self._source.state_dict()}

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        if not self._closed:
            self._closed = True
            self._sync()
            self._mapped = iter(())
            self._node._stats.add(items_in=self.pulled, items_out=self.pulled)
            return self._source.shutdown(timeout, warn=warn)
        return True


def _raised_by(exc: BaseException, source: object) -> bool:
    """``exc`` came out of ``source``'s ``__next__`` (its frame is in the traceback)."""
    code = getattr(getattr(type(source), "__next__", None), "__code__", None)
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False
