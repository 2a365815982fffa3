"""Prefetcher: pulls its source ahead of the consumer on one thread, optionally pinning tensors."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import torch

from datapipes._lifecycle import (
    DEFAULT_JOIN_TIMEOUT,
    INTERRUPT_JOIN_TIMEOUT,
    Deadline,
    close_source,
    expired,
    register_for_exit,
    start_thread,
    wait_slice,
    warn_stuck,
)
from datapipes._run import RunIterator
from datapipes._validate import check_positive_int, check_timeout
from datapipes.base import Node, NodeIterator, StateDict
from datapipes.errors import EpochClosedError, NodeTimeoutError
from datapipes.thread_pool import ThreadPool

__all__ = ["Prefetcher", "pin_memory"]

T = TypeVar("T")

_END = object()


class Prefetcher(Node[T]):
    """Pulls source items ahead of the consumer on one thread (named ``name``, or taken from
    ``pool``), in the source's order.

    Bounded: at most ``depth`` items wait for the consumer, plus one being pulled. With
    ``pin_memory=True`` every tensor in each item (through lists, tuples, namedtuples and
    dicts) is copied to pinned memory on that thread, so the consumer's host-to-device copy
    can be asynchronous; this needs an accelerator.

    Errors: an exception raised by the source is raised by ``next()`` at its place (the same
    object, with a note); the thread then goes on pulling. ``timeout`` makes a ``next()`` that
    waited that long raise :class:`~datapipes.NodeTimeoutError`; the item keeps its place.

    Lifecycle: the thread starts at ``iter()`` and stops at exhaustion, ``close()``, garbage
    collection or interpreter exit, within one bounded wait (a source call still running after
    it is named in a warning and ends on its own). A ``next()`` waiting when another thread
    closes the epoch raises :class:`~datapipes.EpochClosedError`; after ``close()``,
    ``StopIteration``. State: what the source's state was after the last item handed over.
    """

    def __init__(
        self,
        source: Node[T] | Iterable[T],
        depth: int = 2,
        *,
        pin_memory: bool = False,
        timeout: float | None = None,
        pool: ThreadPool | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(source, name=name)
        self.depth = check_positive_int("depth", depth)
        self.pin_memory = bool(pin_memory)
        self.timeout = check_timeout("timeout", timeout)
        self.pool = pool

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return RunIterator(_PrefetchRun(self, state))


class _PrefetchRun(Generic[T]):
    """One epoch: the producer loop (on its thread) and the consumer's side. ``cond`` guards
    every field below it."""

    def __init__(self, node: Prefetcher[T], state: StateDict | None) -> None:
        self.name = node.name
        self.depth = node.depth
        self.timeout = node.timeout
        self.stats = node._stats
        self.transform: Callable[[Any], Any] | None = pin_memory if node.pin_memory else None
        self.source = node._open_source(state)
        self.cond = threading.Condition(threading.Lock())
        self.buffer: deque[tuple[Any, BaseException | None, StateDict]] = deque()
        self.last_state: StateDict = self.source.state_dict()
        self.closed = False
        self.woken = False  # closed while the consumer waited
        self.running = True
        self.in_call = False
        self.thread_name = ""
        self.ident = 0
        self.pulled = 0
        self.thread: threading.Thread | None = None
        self.pid = os.getpid()
        register_for_exit(self)
        if node.pool is not None:
            node.pool.run(self.produce)
        else:
            self.thread = start_thread(self.produce, f"{self.name}-0")

    def produce(self) -> None:
        cond, buffer, source, transform = self.cond, self.buffer, self.source, self.transform
        with cond:
            self.thread_name = threading.current_thread().name
            self.ident = threading.get_ident()
        try:
            while True:
                with cond:
                    while not self.closed and len(buffer) >= self.depth:
                        cond.wait()
                    if self.closed:
                        return
                    self.in_call = True
                start = time.perf_counter()
                error: BaseException | None = None
                item: Any = None
                try:
                    item = next(source)
                    if transform is not None:
                        item = transform(item)
                except StopIteration:
                    item = _END
                except BaseException as exc:  # a source error is an item: raised at its place
                    error = exc
                snapshot = source.state_dict()
                self.stats.add(items_in=item is not _END, wait_source_s=time.perf_counter() - start)
                with cond:
                    self.in_call = False
                    self.pulled += 1
                    if self.closed:
                        return
                    buffer.append((item, error, snapshot))
                    self.stats.peak(len(buffer))
                    cond.notify_all()
                    if item is _END:
                        return
                del item, error
        finally:
            with cond:
                self.running = False
                cond.notify_all()

    def next(self) -> T:
        cond = self.cond
        deadline = None if self.timeout is None else Deadline(self.timeout)
        with cond:
            if self.closed:
                raise StopIteration
            while not self.buffer:
                if self.closed:
                    raise EpochClosedError(f"{self.name}: the epoch was closed by another thread while next() waited")
                if not self.running:
                    raise RuntimeError(f"{self.name}: the prefetching thread ended without ending the stream")
                if not cond.wait(wait_slice(deadline)) and not self.buffer and expired(deadline):
                    raise NodeTimeoutError(self.name, self.pulled, None, self.timeout)
            item, error, snapshot = self.buffer.popleft()
            if item is _END:
                self.buffer.appendleft((item, error, snapshot))  # every later next() ends too
                raise StopIteration
            self.last_state = snapshot
            cond.notify_all()
        self.stats.add(items_out=1)
        if error is not None:
            raise error
        return item  # type: ignore[no-any-return]

    def state_dict(self) -> StateDict:
        with self.cond:
            return {"source": self.last_state}

    def interrupt(self) -> None:
        """Ctrl-C: stop now; a source call in progress ends on its own."""
        self.shutdown(INTERRUPT_JOIN_TIMEOUT, warn=False)

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """Stop the producer and close the source within ``timeout`` in all; True when the
        producer stopped in time. Idempotent."""
        if self.pid != os.getpid():
            self.closed = True  # a forked child has no producer; take no lock that one held
            return True
        with self.cond:
            if self.closed:
                return not self.running
            self.closed = True
            self.buffer.clear()
            self.cond.notify_all()
            busy = self.in_call
        deadline = Deadline(timeout)
        source_stopped = close_source(self.source, busy=busy, timeout=deadline.remaining(), warn=warn)
        with self.cond:
            own = self.ident == threading.get_ident()
            while self.running and not own:
                remaining = deadline.remaining()
                if remaining is not None and remaining <= 0:
                    break
                self.cond.wait(remaining)
            stuck = self.running and not own
            name = self.thread_name
        if stuck:
            if warn:
                warn_stuck([f"{self.name}: {name}"], timeout)
            return False
        if self.thread is not None and not own:
            self.thread.join(deadline.remaining())
        if busy:
            source_stopped = (
                close_source(self.source, busy=False, timeout=deadline.remaining(), warn=warn) and source_stopped
            )
        return source_stopped


def pin_memory(data: Any) -> Any:
    """A copy of ``data`` with every tensor in pinned memory (containers rebuilt, others as they are)."""
    if isinstance(data, torch.Tensor):
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, Mapping):
        return _pin_mapping(data)
    if isinstance(data, Sequence):
        return _pin_sequence(data)
    pin = getattr(data, "pin_memory", None)
    return pin() if callable(pin) else data


def _pin_mapping(data: Mapping[Any, Any]) -> Any:
    """The mapping rebuilt with its values pinned; a plain ``dict`` when its type cannot be
    built from one."""
    pinned = {k: pin_memory(v) for k, v in data.items()}
    try:
        return type(data)(pinned)  # type: ignore[call-arg]
    except TypeError:
        return pinned


def _pin_sequence(data: Sequence[Any]) -> Any:
    """A namedtuple, tuple or other sequence rebuilt with its items pinned; a ``list`` when
    its type cannot be built from one."""
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(pin_memory(v) for v in data))
    items = [pin_memory(v) for v in data]
    if isinstance(data, tuple):
        return tuple(items)
    try:
        return type(data)(items)  # type: ignore[call-arg]
    except TypeError:
        return items
