"""AsyncFetcher: awaits a coroutine function for each item on one event-loop thread."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Literal, TypeVar

from datapipes._run import RunIterator
from datapipes._validate import check_choice, check_non_negative_int, check_positive_int, check_timeout
from datapipes.base import Node, NodeIterator, StateDict
from datapipes.dispatch import Dispatcher, DispatchSettings, LoopTransport
from datapipes.dispatch.stall import StallWatch
from datapipes.event_loop import EventLoopThread
from datapipes.thread_mapper import OUT_OF_ORDER_LEAD

__all__ = ["AsyncFetcher"]

T = TypeVar("T")
U = TypeVar("U")


class AsyncFetcher(Node[U]):
    """Yields ``await fn(item)`` for each source item, with up to ``max_concurrency``
    coroutines in flight on one event-loop thread.

    Bounds: at most ``capacity`` (``max_concurrency + max_pending``) items are in the node,
    waiting their turn, awaiting ``fn`` (at most ``max_concurrency`` of them) or finished and
    waiting for the consumer (``stats()["peak_buffered"]`` counts the finished ones). The
    source is pulled in the consumer's thread, at the start of ``next()`` (never on the loop:
    a source may itself wait on that loop), up to that bound; with ``max_pending`` the loop
    starts an item that waits its turn as soon as another ends, so the node keeps
    ``max_concurrency`` coroutines awaiting while the consumer is away (between ``next()``
    calls), as a :class:`~datapipes.ThreadMapper`'s threads keep working through its
    ``max_pending`` items.
    With ``in_order=False`` the newest item pulled is also at most
    ``OUT_OF_ORDER_LEAD * capacity`` (4x) items ahead of the oldest unfinished one, so
    the checkpoint state stays bounded behind a stuck item: once that lead is reached,
    ``next()`` waits for the oldest item (``timeout`` applies) and pulls nothing more.
    ``max_lead`` sets that lead instead (a :class:`~datapipes.ReadyBatcher` sets it from its
    window).

    Loop: the fetcher starts one named event-loop thread (``f"{name}-loop"``) at its first
    epoch and keeps it for every later epoch, until :meth:`close` or garbage collection of the
    node; or it runs on ``loop``, an :class:`EventLoopThread` its owner keeps. Never a loop per
    item or per epoch. ``fn``'s coroutines run concurrently with each other on that loop.

    Order and errors are as in :class:`~datapipes.ThreadMapper`: ``in_order=True`` yields in
    source order, ``False`` in completion order; an exception is raised by ``next()`` at its
    item's place, the same object with a note; ``on_error="skip"`` drops failed items and
    counts them. That holds for every exception ``fn`` raises, ``SystemExit`` and
    ``KeyboardInterrupt`` included (never skipped): none escapes into the event loop, which
    keeps running. A ``KeyboardInterrupt``, whether raised in ``next()``'s own wait (Ctrl-C)
    or by ``fn``, stops the epoch as ``close()`` does but waits at most half a second for the
    coroutines in flight, without a warning; coroutines still running then are abandoned
    with the fetcher's own loop, which the next epoch replaces. ``timeout`` (seconds) makes
    ``next()`` raise :class:`~datapipes.NodeTimeoutError` naming the item it waited for; the
    item keeps its place. Should the loop close or die while an item is in flight, ``next()``
    raises :class:`~datapipes.WorkerLostError` naming the loop's thread (or, when a
    ``SystemExit`` or ``KeyboardInterrupt`` killed the loop, that exception itself).

    Lifecycle: closing the iterator (or exhaustion, ``break`` and garbage collection,
    interpreter exit) cancels the coroutines still in flight and awaits their cancellation,
    up to 30 s (then a warning). A ``next()`` waiting in another thread wakes and raises
    :class:`~datapipes.EpochClosedError` (the epoch did not end), as every concurrent node's
    does; a ``next()`` after the close raises ``StopIteration``. In a forked child, closing only forgets the run (its
    loop thread is the parent's). ``state_dict()`` may be called from any thread.
    """

    def __init__(
        self,
        source: Node[T] | Iterable[T],
        fn: Callable[[T], Awaitable[U]],
        *,
        max_concurrency: int = 16,
        in_order: bool = True,
        on_error: Literal["raise", "skip"] = "raise",
        timeout: float | None = None,
        loop: EventLoopThread | None = None,
        name: str | None = None,
        max_lead: int | None = None,
        max_pending: int = 0,
        stall: StallWatch | None = None,
    ) -> None:
        super().__init__(source, name=name)
        #: ``in_order=False``: how far the newest item pulled may be past the oldest unfinished
        #: one (None: ``OUT_OF_ORDER_LEAD`` times ``max_concurrency``); a ``ReadyBatcher`` sets it.
        self.max_lead = None if max_lead is None else check_positive_int("max_lead", max_lead)
        if not callable(fn):
            raise TypeError(
                f"fn must be an async function (a callable returning an awaitable), got {type(fn).__name__}"
            )
        self.fn = fn
        self.max_concurrency = check_positive_int("max_concurrency", max_concurrency)
        self.max_pending = check_non_negative_int("max_pending", max_pending)
        self.in_order = bool(in_order)
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self.timeout = check_timeout("timeout", timeout)
        self.stall = stall  # see ThreadMapper
        self._loop = loop
        self._owns_loop = loop is None

    @property
    def capacity(self) -> int:
        """The most items in the node at once: ``max_concurrency + max_pending``."""
        return self.max_concurrency + self.max_pending

    def event_loop(self) -> EventLoopThread:
        """The loop thread this fetcher runs on (started on first use when it owns it)."""
        with self._state_lock:
            if self._loop is None or (self._owns_loop and self._loop.closed):
                self._loop = EventLoopThread(f"{self.name}-loop")
            return self._loop

    def close(self) -> None:
        """Stop the fetcher's own event-loop thread (a loop passed in is its owner's to close)."""
        with self._state_lock:
            loop = self._loop if self._owns_loop else None
        if loop is not None:
            loop.close()

    def _open(self, state: StateDict | None) -> NodeIterator[U]:
        limit = self.capacity
        settings = DispatchSettings(
            self.name,
            capacity=limit,
            max_lead=limit if self.in_order else self.max_lead or OUT_OF_ORDER_LEAD * limit,
            in_order=self.in_order,
            timeout=self.timeout,
            skip_errors=self.on_error == "skip",
            stall=self.stall,
        )
        transport = LoopTransport(
            self.name,
            self.fn,
            self.event_loop(),
            owns_loop=self._owns_loop,
            stats=self._stats,
            max_running=self.max_concurrency if self.max_pending else None,
        )
        source = self._open_source(state)
        skip = state.get("skip", ()) if state else ()
        return RunIterator(Dispatcher[U](settings, source, skip, transport, self._stats))
