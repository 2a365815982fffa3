"""Fixture functions and sources for the datapipes tests, named by what they do.

Everything that counts is behind a lock, never the GIL, so the tests hold on free-threaded
CPython too. Nothing here measures wall-clock time: durations only make items finish in a
chosen order, and bounds are proven with counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

import datapipes as dp


class PeakCounter:
    """Counts the calls inside ``with counter:`` at once and remembers the peak."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current = 0
        self.peak = 0
        self.total = 0

    def __enter__(self) -> PeakCounter:
        with self._lock:
            self.current += 1
            self.total += 1
            self.peak = max(self.peak, self.current)
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self.current -= 1


class CountingRange:
    """An iterable over ``range(n)`` that counts the items pulled from it, and the items the
    test says it consumed, so ``in_node()`` is how many were taken and not yet consumed."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._lock = threading.Lock()
        self.pulled = 0
        self.consumed = 0

    def __iter__(self) -> Iterator[int]:
        return _CountingIterator(self)

    def _pull(self, i: int) -> None:
        with self._lock:
            self.pulled += 1

    def consume(self) -> None:
        with self._lock:
            self.consumed += 1

    def in_node(self) -> int:
        with self._lock:
            return self.pulled - self.consumed


class _CountingIterator:
    def __init__(self, owner: CountingRange) -> None:
        self._owner = owner
        self._i = 0
        self._lock = threading.Lock()

    def __iter__(self) -> _CountingIterator:
        return self

    def __next__(self) -> int:
        with self._lock:
            i = self._i
            if i >= self._owner.n:
                raise StopIteration
            self._i += 1
        self._owner._pull(i)
        return i


def slow_at(index: int, seconds: float, *, counter: PeakCounter | None = None) -> Callable[[int], int]:
    """``fn(x) = x``, sleeping ``seconds`` for item ``index`` (counted in ``counter``)."""

    def fn(x: int) -> int:
        with counter or contextlib.nullcontext():
            if x == index:
                time.sleep(seconds)
            return x

    return fn


def reversed_durations(n: int, unit: float = 0.004) -> Callable[[int], int]:
    """``fn(x) = x``; item ``i`` sleeps ``(n - i) * unit``: earlier items finish later."""

    def fn(x: int) -> int:
        time.sleep((n - x) * unit)
        return x

    return fn


def async_reversed_durations(n: int, unit: float = 0.004) -> Callable[[int], Any]:
    async def fn(x: int) -> int:
        await asyncio.sleep((n - x) * unit)
        return x

    return fn


class FailingAt:
    """``fn(x) = x``, raising a fresh ``exc_type`` for each item in ``indices``; the objects it
    raised are kept in ``raised[x]`` so a test can check the consumer got the same one."""

    def __init__(self, *indices: int, exc_type: type[BaseException] = ValueError) -> None:
        self.indices = set(indices)
        self.exc_type = exc_type
        self._lock = threading.Lock()
        self.raised: dict[int, BaseException] = {}

    def _fail(self, x: int) -> None:
        if x in self.indices:
            exc = self.exc_type(f"item {x} failed")
            with self._lock:
                self.raised[x] = exc
            raise exc

    def __call__(self, x: int) -> int:
        self._fail(x)
        return x


def failing_at(*indices: int, exc_type: type[BaseException] = ValueError) -> FailingAt:
    return FailingAt(*indices, exc_type=exc_type)


class AsyncFailingAt(FailingAt):
    """The coroutine-function twin of :class:`FailingAt`."""

    async def __call__(self, x: int) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        self._fail(x)
        return x


async def async_identity(x: Any) -> Any:
    await asyncio.sleep(0)
    return x


def collect_outcomes(it: Iterator[Any]) -> list[Any]:
    """Every next() result, with exceptions as values, until StopIteration."""
    out: list[Any] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except Exception as exc:
            out.append(exc)


def identity(x: Any) -> Any:
    return x


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not in ``before`` (no waiting: callers expect them joined)."""
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


def collect() -> None:
    """Drop what only a reference cycle keeps alive (finalizers then stop their threads)."""
    gc.collect()


def close_graph(node: dp.Node[Any] | None) -> None:
    """Close every AsyncFetcher's own loop thread along a chain of nodes."""
    while node is not None:
        if isinstance(node, dp.AsyncFetcher):
            node.close()
        node = node.source


def normalize(x: Any) -> Any:
    """Tensors as nested lists, lists and tuples as lists: comparable with ``==``."""
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [normalize(e) for e in x]
    return x


def hashable(x: Any) -> Any:
    """``normalize(x)`` with lists turned into tuples, for multisets."""
    x = normalize(x)
    if isinstance(x, list):
        return tuple(hashable(e) for e in x)
    return x
