"""AsyncFetcher: awaits a coroutine function for each item on one event-loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import queue
import threading
import time
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, INTERRUPT_JOIN_TIMEOUT, close_source, register_for_exit
from datapipes._progress import Progress
from datapipes._run import RunIterator
from datapipes._validate import check_choice, check_positive_int, check_timeout
from datapipes.base import Node, NodeIterator, StateDict, add_item_note
from datapipes.errors import NodeTimeoutError, WorkerLostError
from datapipes.event_loop import EventLoopThread
from datapipes.thread_mapper import OUT_OF_ORDER_LEAD

__all__ = ["AsyncFetcher"]

T = TypeVar("T")
U = TypeVar("U")


class AsyncFetcher(Node[U]):
    """Yields ``await fn(item)`` for each source item, with up to ``max_concurrency``
    coroutines in flight on one event-loop thread.

    Bounds: at most ``max_concurrency`` items are in the node, running or finished and
    waiting for the consumer (``stats()["peak_buffered"]`` counts the finished ones). The
    source is pulled in the consumer's thread, inside ``next()``, to keep that many in flight.
    With ``in_order=False`` the newest item pulled is also at most
    ``OUT_OF_ORDER_LEAD * max_concurrency`` (4x) items ahead of the oldest unfinished one, so
    the checkpoint state stays bounded behind a stuck item: once that lead is reached,
    ``next()`` waits for the oldest item (``timeout`` applies) and pulls nothing more.

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
    up to 30 s (then a warning). A ``next()`` waiting in another thread wakes and ends
    (``StopIteration``; a ThreadLoader's epoch turns that into
    :class:`~datapipes.EpochClosedError`). In a forked child, closing only forgets the run (its
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
    ) -> None:
        super().__init__(source, name=name)
        if not callable(fn):
            raise TypeError(
                f"fn must be an async function (a callable returning an awaitable), got {type(fn).__name__}"
            )
        self.fn = fn
        self.max_concurrency = check_positive_int("max_concurrency", max_concurrency)
        self.in_order = bool(in_order)
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self.timeout = check_timeout("timeout", timeout)
        self._loop = loop
        self._owns_loop = loop is None

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
        return RunIterator(_FetchRun(self, state))


class _Outcome:
    """What one call of ``fn`` came to: its value, or the exception it raised.

    Errors cross from the loop thread to the consumer as values: a ``concurrent.futures``
    future chained to a task would replace a ``TimeoutError`` or ``CancelledError`` raised by
    ``fn`` with a new object, losing its note and traceback."""

    __slots__ = ("done_at", "error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error
        self.done_at = time.perf_counter()  # from here on it waits for the consumer


class _Pending:
    __slots__ = ("future", "item", "own", "seq")

    def __init__(self, seq: int, item: Any, future: concurrent.futures.Future[_Outcome], own: bool) -> None:
        self.seq = seq
        self.item = item
        self.future = future
        self.own = own  # True: the future runs fn; False: it carries the source's exception


#: Put in ``completed`` by ``shutdown`` to wake a consumer waiting for any completion.
_CLOSED = _Pending(-1, None, concurrent.futures.Future(), False)


def _lost(future: concurrent.futures.Future[_Outcome]) -> bool:
    """A done future without an outcome: its coroutine never finished (the loop closed)."""
    return future.cancelled() or future.exception() is not None


def _put_done(completed: queue.SimpleQueue[_Pending], pending: _Pending, _future: object) -> None:
    completed.put(pending)


class _FetchRun(Generic[U]):
    """Run state of one epoch.

    The consumer thread calls ``next``; ``shutdown`` may come from another thread (a node
    that pulls this one on its own thread, a finalizer, the exit hook), and ``state_dict``
    from any thread. So every field below that more than one thread reads or writes
    (``closed``, ``exhausted``, ``next_seq``, ``in_flight``, ``finished_waiting`` and
    ``progress``) is read and written under ``lock``; the waits and the source pulls happen
    outside it. ``tasks`` is touched by the loop thread only."""

    def __init__(self, node: AsyncFetcher[U], state: StateDict | None) -> None:
        self.name = node.name
        self.fn = node.fn
        self.limit = node.max_concurrency
        # Out of order: how far the newest item pulled may run ahead of the oldest unfinished.
        self.max_lead = self.limit if node.in_order else OUT_OF_ORDER_LEAD * self.limit
        self.in_order = node.in_order
        self.skip_errors = node.on_error == "skip"
        self.timeout = node.timeout
        self.stats = node._stats
        self.loop = node.event_loop()
        self.owns_loop = node._owns_loop
        self.pid = os.getpid()
        self.source = node._open_source(state)
        self.lock = threading.Lock()
        self.progress = Progress(self.source.state_dict(), state.get("skip", ()) if state else ())  # lock
        self.in_flight: deque[_Pending] = deque()  # pull order; guarded by lock
        self.completed: queue.SimpleQueue[_Pending] = queue.SimpleQueue()  # in_order=False; <= limit
        self.next_seq = 0  # guarded by lock
        self.exhausted = False  # guarded by lock
        self.closed = False  # guarded by lock
        self.finished_waiting = 0  # results finished and not yet consumed; guarded by lock
        # Done once the run is shut down: wakes a consumer waiting in order for an item
        # whose coroutine ignores its cancellation.
        self.closed_event: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.tasks: set[asyncio.Task[Any]] = set()  # the loop thread only
        register_for_exit(self)

    async def _call(self, seq: int, item: Any) -> _Outcome:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        start = time.perf_counter()
        try:
            outcome = _Outcome(value=await self.fn(item))
        except asyncio.CancelledError as exc:
            if task.cancelling():  # cancelled by shutdown or by closing the loop
                raise
            outcome = self._failed(exc, seq, item)  # raised by fn itself: an error like any other
        except GeneratorExit:  # the coroutine is being closed, not an outcome
            raise
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: out of the loop
            # (asyncio re-raises them out of run_forever, which would kill the loop thread),
            # to the consumer, who raises them at this item's place.
            outcome = self._failed(exc, seq, item)
        finally:
            self.stats.add(busy_s=time.perf_counter() - start)
            self.tasks.discard(task)
        self._finished()
        return outcome

    def _failed(self, exc: BaseException, seq: int, item: Any) -> _Outcome:
        add_item_note(exc, self.name, seq, item)
        self.stats.add(errors=1, skipped=1 if self._skips(exc) else 0)
        return _Outcome(error=exc)

    def _skips(self, exc: BaseException) -> bool:
        """``on_error="skip"`` drops errors, never a request to stop (SystemExit, Ctrl-C)."""
        return self.skip_errors and isinstance(exc, (Exception, asyncio.CancelledError))

    def _finished(self) -> None:
        with self.lock:
            self.finished_waiting += 1
            waiting = self.finished_waiting
        self.stats.peak(waiting)

    def _fill(self) -> None:
        """Pull source items and start their coroutines until ``limit`` are in flight (and,
        out of order, until the newest is ``max_lead`` past the oldest unfinished one)."""
        while True:
            with self.lock:
                if (
                    self.closed
                    or self.exhausted
                    or len(self.in_flight) >= self.limit
                    or self.next_seq - self.progress.frontier >= self.max_lead
                ):
                    return
            start = time.perf_counter()
            own = True
            try:
                item = next(self.source)
            except StopIteration:
                with self.lock:
                    self.exhausted = True
                return
            except KeyboardInterrupt:  # Ctrl-C in this thread: stop the epoch now
                raise
            except BaseException as exc:  # a source error is an item: raised at its place
                item, own = exc, False
            snapshot = self.source.state_dict()
            self.stats.add(items_in=1, wait_source_s=time.perf_counter() - start)
            with self.lock:
                if self.closed:
                    return
                seq = self.next_seq
                self.next_seq += 1
                if self.progress.pulled(seq, snapshot):
                    self.progress.finished(seq)
                    continue
                if own:
                    future = self.loop.submit(self._call(seq, item))
                else:
                    future = concurrent.futures.Future()
                    future.set_result(_Outcome(error=item))
                    self.finished_waiting += 1
                pending = _Pending(seq, item, future, own)
                self.in_flight.append(pending)
            if not self.in_order:
                future.add_done_callback(functools.partial(_put_done, self.completed, pending))

    def _wait(self) -> _Pending:
        """The next finished item (in pull order with ``in_order``), removed from ``in_flight``."""
        if self.in_order:
            with self.lock:
                if self.closed:
                    raise StopIteration
                head = self.in_flight[0]
            waits: list[concurrent.futures.Future[Any]] = [head.future, self.closed_event]
            concurrent.futures.wait(waits, timeout=self.timeout, return_when=concurrent.futures.FIRST_COMPLETED)
            with self.lock:
                if self.closed:
                    raise StopIteration  # the node's contract (tests/test_datapipes_async.py); the loader raises EpochClosedError
            if not head.future.done():
                raise NodeTimeoutError(self.name, head.seq, head.item, self.timeout)
            pending = head
        else:
            try:
                pending = self.completed.get(timeout=self.timeout)
            except queue.Empty:
                raise self._timeout_error() from None
        with self.lock:
            if self.closed or pending is _CLOSED:
                raise StopIteration  # the node's contract (tests/test_datapipes_async.py); the loader raises EpochClosedError
            self.in_flight.remove(pending)
            if not _lost(pending.future):
                self.finished_waiting -= 1
                # From here on the item counts as handed to the consumer (or skipped).
                self.progress.finished(pending.seq)
        return pending

    def _timeout_error(self) -> NodeTimeoutError:
        """Out of order: the oldest item in flight is the one waited for."""
        with self.lock:
            oldest = self.in_flight[0] if self.in_flight else None
        if oldest is None:
            return NodeTimeoutError(self.name, self.next_seq, None, self.timeout)
        return NodeTimeoutError(self.name, oldest.seq, oldest.item, self.timeout)

    def _lost(self, pending: _Pending) -> BaseException:
        """The error for an item whose coroutine never finished: its loop closed or died."""
        cause = None if pending.future.cancelled() else pending.future.exception()
        death = cause.__cause__ if cause is not None else None
        if isinstance(death, (SystemExit, KeyboardInterrupt)):
            return death  # raised by a task of the loop: what the caller asked for, as itself
        error = WorkerLostError(
            f"{self.name}: item #{pending.seq} of this epoch was lost: the event loop {self.loop.name!r} "
            + ("was closed" if death is None else f"died of {death!r}")
            + " while the epoch was running",
            worker=self.loop.name,
        )
        error.__cause__ = cause
        return error

    def next(self) -> U:
        while True:
            self._fill()
            with self.lock:
                if self.closed or not self.in_flight:
                    raise StopIteration
            pending = self._wait()
            if _lost(pending.future):  # the loop closed or died before the coroutine finished
                raise self._lost(pending)
            outcome: _Outcome = pending.future.result()
            waited = time.perf_counter() - outcome.done_at
            if outcome.error is None:
                self.stats.add(items_out=1, wait_consumer_s=waited)
                return outcome.value  # type: ignore[no-any-return]
            if pending.own and self._skips(outcome.error):
                self.stats.add(wait_consumer_s=waited)
                continue
            self.stats.add(items_out=1, wait_consumer_s=waited)
            raise outcome.error

    def state_dict(self) -> StateDict:
        with self.lock:
            return self.progress.state()

    async def _cancel_tasks(self) -> None:
        tasks = list(self.tasks)
        self._cancel_tasks_now()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _cancel_tasks_now(self) -> None:
        # Once each: a second cancel() would interrupt the coroutine's own clean-up (an
        # ``await`` in its ``finally``), which is what awaiting the cancellation waits for.
        for task in list(self.tasks):
            if not task.cancelling():
                task.cancel()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """Cancel the coroutines in flight and await them, then close the source. Idempotent."""
        self._stop(timeout, warn=warn)
        return True

    def interrupt(self) -> None:
        """Stop after a ``KeyboardInterrupt``: wait at most ``INTERRUPT_JOIN_TIMEOUT`` for the
        cancelled coroutines and warn about none. Should some still run (they ignore their
        cancellation, or block the loop), a loop the fetcher owns is closed at once, leaving
        them behind, so neither the next epoch nor interpreter exit waits on them."""
        if not self._stop(INTERRUPT_JOIN_TIMEOUT, warn=False) and self.owns_loop:
            self.loop.close(0.0, warn=False)

    def _stop(self, timeout: float | None, *, warn: bool) -> bool:
        """Shut down; False if coroutines of this run were still running after ``timeout``."""
        if self.pid != os.getpid():
            # A forked child: the loop thread and its tasks are the parent's, and a lock may
            # have been held at the fork by one of its threads. Take nothing, wait for nothing.
            self.closed = True
            return True
        with self.lock:
            if self.closed:
                return True
            self.closed = True
            self.in_flight.clear()
        # Wakes a consumer waiting: out of order on ``completed``, in order on ``closed_event``.
        # (Cancelling the futures instead would cancel each task a second time, from the
        # future's callback.)
        self.completed.put(_CLOSED)
        self.closed_event.set_result(None)
        finished = True
        if not self.loop.closed:
            try:
                self.loop.run(self._cancel_tasks(), timeout)
            except RuntimeError:
                # Either the loop closed meanwhile (closing it cancels every task), or this
                # is the loop's own thread (a finalizer run there), which cannot wait for
                # itself: cancel now, the loop finishes the cancellation.
                try:
                    self.loop.loop.call_soon_threadsafe(self._cancel_tasks_now)
                except RuntimeError:
                    pass
            except concurrent.futures.TimeoutError:
                finished = False
                if warn:
                    warnings.warn(
                        f"{self.name}: coroutines still running {timeout}s after they were cancelled",
                        RuntimeWarning,
                        stacklevel=3,
                    )
        # Another thread may be inside next(source) (the one pulling this fetcher); a
        # generator refuses close() then, and is closed when that thread drops it.
        close_source(self.source, busy=True, timeout=timeout)
        return finished
