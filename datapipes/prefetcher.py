"""Prefetcher: pulls its source ahead of the consumer on one thread, optionally pinning tensors."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import torch

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, close_source
from datapipes._run import RunIterator
from datapipes._validate import check_positive_int, check_timeout
from datapipes.base import Node, NodeIterator, StateDict
from datapipes.dispatch import Dispatcher, DispatchSettings, ThreadTransport
from datapipes.dispatch.stall import StallWatch
from datapipes.thread_pool import ThreadPool

__all__ = ["Prefetcher", "pin_memory"]

T = TypeVar("T")


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
        stall: StallWatch | None = None,
    ) -> None:
        super().__init__(source, name=name)
        self.depth = check_positive_int("depth", depth)
        self.pin_memory = bool(pin_memory)
        self.timeout = check_timeout("timeout", timeout)
        self.stall = stall  # see ThreadMapper
        self.pool = pool

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return RunIterator(_PrefetchRun(self, state))


class _PrefetchRun(Generic[T]):
    """One epoch: the node's one dispatcher (:class:`~datapipes.dispatch.Dispatcher`) over one
    worker thread whose every item is one pull of the source, so the bound, the order, the
    timeout, a close from another thread, Ctrl-C and a lost thread are the dispatcher's; this
    adds the source's state after the last item handed over."""

    def __init__(self, node: Prefetcher[T], state: StateDict | None) -> None:
        source = node._open_source(state)
        self.lock = threading.Lock()
        self.last_state: StateDict = source.state_dict()  # guarded by lock
        capacity = node.depth + 1  # ``depth`` waiting, one being pulled
        settings = DispatchSettings(
            node.name,
            capacity=capacity,
            max_lead=capacity,
            in_order=True,
            timeout=node.timeout,
            skip_errors=False,
            stall=node.stall,
        )
        transport = ThreadTransport(
            node.name,
            1,
            fn=_Pull(source, pin_memory if node.pin_memory else None),
            worker_fn=None,
            stop_ends_share=True,  # the source ran out: the epoch ends
            worker_of=None,
            first_thread=0,
            capacity=capacity,
            in_order=True,
            pool=node.pool,
            stats=node._stats,
        )
        self.dispatcher = Dispatcher[tuple[T, StateDict]](settings, _Pulls(source), (), transport, node._stats)

    def next(self) -> T:
        try:
            item, snapshot = self.dispatcher.next()
        except _SourceFailed as failed:  # a source error is an item: raised as itself, at its place
            error, after = failed.error, failed.after
            del failed
            assert error is not None and after is not None
        else:
            with self.lock:
                self.last_state = snapshot
            return item
        with self.lock:
            self.last_state = after
        try:
            raise error  # outside the handler: the error as the source raised it, with no context added
        finally:
            del error  # the frame the error's traceback holds must not hold the error (a cycle)

    def state_dict(self) -> StateDict:
        with self.lock:
            return {"source": self.last_state}

    def interrupt(self) -> None:
        self.dispatcher.interrupt()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        return self.dispatcher.shutdown(timeout, warn=warn)


class _SourceFailed(Exception):
    """The source raised ``error``; its state after the failed pull is ``after``. Carries the
    error through the dispatcher, which notes its own functions' errors, not a source's. Built
    from its message alone, as every error class is (torch's ``ExceptionWrapper.reraise()``)."""

    error: BaseException | None = None
    after: StateDict | None = None

    @classmethod
    def of(cls, error: BaseException, after: StateDict) -> _SourceFailed:
        failed = cls(repr(error))
        failed.error, failed.after = error, after
        return failed


class _Pull:
    """One pull of the source (the item made ready by ``transform``), with the source's state
    after it; ``StopIteration`` when the source ran out."""

    def __init__(self, source: NodeIterator[Any], transform: Callable[[Any], Any] | None) -> None:
        self.source = source
        self.transform = transform

    def __call__(self, token: int) -> tuple[Any, StateDict]:
        source = self.source
        try:
            item = next(source)
            if self.transform is not None:
                item = self.transform(item)
        except StopIteration:
            raise
        except BaseException as exc:
            raise _SourceFailed.of(exc, source.state_dict()) from None
        return item, source.state_dict()


class _Pulls(NodeIterator[int]):
    """The dispatcher's source: pull 0, 1, 2, ... of the prefetched source, which closing
    this closes (the dispatcher closes it before it waits for its thread, which may be inside
    the source's ``next()``)."""

    def __init__(self, source: NodeIterator[Any]) -> None:
        self.source = source
        self.count = itertools.count()

    def __next__(self) -> int:
        return next(self.count)

    def state_dict(self) -> StateDict:
        return {}

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        return close_source(self.source, busy=True, timeout=timeout, warn=warn)


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
