"""EventLoopThread: one asyncio event loop running on one named thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from datapipes._lifecycle import (
    DEFAULT_JOIN_TIMEOUT,
    EXIT_JOIN_TIMEOUT,
    join_threads,
    register_for_exit,
    start_thread,
)

__all__ = ["EventLoopThread"]

T = TypeVar("T")

Closer = Callable[[], Awaitable[object]]


class EventLoopThread:
    """An asyncio loop on a daemon thread named ``name``, for coroutines submitted from
    other threads (``submit`` returns a ``concurrent.futures.Future``; ``run`` waits for it;
    ``submit_all`` hands several over with at most one wake-up of the loop's thread).

    Ownership: owned by whoever made it (an :class:`~datapipes.AsyncFetcher`, or a loader that
    shares one loop across its fetchers and epochs). ``close()`` is idempotent and also runs
    when the object is garbage-collected (a finalizer that holds no reference to it) or at
    interpreter exit (the weak exit hook, with a 5 s timeout).

    Closing, in this order: the *closers* registered with :meth:`add_closer` are awaited on the
    loop, one after another in the order they were added, while the loop's tasks still run
    (for async clean-up such as an async dataset's ``aclose()``); then every task still on the
    loop is cancelled and awaited, async generators are shut down, the loop stops and the
    thread ends. Closers run exactly once, whichever of ``close()``, garbage collection or the
    exit hook comes first, and also when the loop dies. An error from a closer is warned
    (``RuntimeWarning``) and never keeps the loop from stopping.

    Bounds: all of that gets ``timeout`` seconds in all (``close(timeout)``, 30 s by default):
    a closer, or a task that ignores its cancellation, still running at the deadline is
    abandoned with a ``RuntimeWarning`` (its future fails with ``RuntimeError``). ``close()``
    returns within about ``timeout`` even when a task blocks the loop thread in a synchronous
    call: it then warns once, naming the thread, and the daemon thread ends when that call
    returns. ``close()`` from the loop thread itself does not wait. In a forked child of the
    process that made it, ``close()`` (and collection) only marks it closed: the loop thread
    is the parent's, so nothing is sent to it or waited for.

    Errors: the loop thread never dies silently. Should a callback raise a ``BaseException``
    out of the loop (asyncio lets ``SystemExit`` and ``KeyboardInterrupt`` escape a task), the
    loop is wound down as by ``close()``, a ``RuntimeWarning`` names the thread and the
    exception, every future ``submit`` returned that is still pending fails with a
    ``RuntimeError`` (so no waiter waits forever), and ``submit`` raises ``RuntimeError``.
    """

    def __init__(self, name: str = "datapipes-loop") -> None:
        self.name = name
        self.loop = loop = asyncio.new_event_loop()
        self._state = state = _LoopState(name, loop)
        started = threading.Event()
        # The thread and the finalizer hold the shared state, never ``self``.
        state.thread = self._thread = start_thread(functools.partial(_run_loop, state, started), name)
        started.wait()
        self._finalizer = weakref.finalize(self, state.close, DEFAULT_JOIN_TIMEOUT)
        self._finalizer.atexit = False  # the exit hook closes it, with a shorter timeout
        register_for_exit(self)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; thread-safe. ``RuntimeError`` once closed (``coro`` is closed)."""
        return self._state.submit(coro)

    def submit_all(self, coros: list[Coroutine[Any, Any, T]]) -> list[concurrent.futures.Future[T]]:
        """``[submit(c) for c in coros]`` in one hand-over to the loop (one wake-up of its thread,
        where ``submit`` costs one each); the coroutines start in order. ``RuntimeError`` once
        closed (every coroutine is closed)."""
        return self._state.submit_all(coros)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from another thread only)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("EventLoopThread.run() called from its own loop thread would deadlock")
        return self.submit(coro).result(timeout)

    def add_closer(self, closer: Closer) -> None:
        """Have ``await closer()`` run on the loop when it closes (see the class docstring).

        ``closer`` is kept until then: if it references this object, only ``close()`` or the
        exit hook closes the loop, not garbage collection. ``RuntimeError`` once closing."""
        if not callable(closer):
            raise TypeError(f"closer must be a callable returning an awaitable, got {type(closer).__name__}")
        self._state.add_closer(closer)

    @property
    def closed(self) -> bool:
        """True once ``close()`` began (or the loop died): ``submit`` refuses new work."""
        return self._state.is_closed()

    def close(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> None:
        """Await the closers, cancel the tasks, stop the loop and join the thread, within
        ``timeout`` seconds; idempotent. ``warn=False``: no warning about what outlived it."""
        self._finalizer.detach()
        self._state.close(timeout, warn=warn)

    shutdown = close

    def __repr__(self) -> str:
        return f"EventLoopThread({self.name!r}{', closed' if self.closed else ''})"


class _LoopState:
    """What the loop thread, the finalizer and the :class:`EventLoopThread` share. It holds
    no reference to the ``EventLoopThread``, so garbage collection can finalize that.

    Every field is guarded by ``lock``: ``closing`` (no new work; set by ``close`` or by the
    loop dying), ``deadline`` and ``warn`` (set once, by whichever ends the loop first),
    ``futures`` (returned by ``submit`` and not done), ``closers`` (taken once)."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.loop = loop
        self.pid = os.getpid()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.closing = False
        self.deadline: float | None = None
        self.timeout: float | None = None
        self.warn = True
        self.error: BaseException | None = None  # what killed the loop, if anything did
        self.futures: set[concurrent.futures.Future[Any]] = set()
        # submit_all's coroutines, for the loop thread to start; not empty: it is due to.
        self.inbox: list[tuple[Coroutine[Any, Any, Any], concurrent.futures.Future[Any]]] = []
        self.started: set[asyncio.Task[Any]] = set()  # the loop thread's: submit_all's tasks not done
        self.closers: list[Closer] | None = []

    # -- any thread ---------------------------------------------------------------------------
    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self.lock:
            if self.closing:
                coro.close()
                raise RuntimeError(self._closed_message())
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
            self.futures.add(future)
        # Outside the lock: a future already done runs the callback here and now.
        future.add_done_callback(self._forget)
        return future

    def submit_all(self, coros: list[Coroutine[Any, Any, T]]) -> list[concurrent.futures.Future[T]]:
        futures: list[concurrent.futures.Future[T]] = [concurrent.futures.Future() for _ in coros]
        with self.lock:
            try:
                if self.closing:
                    raise RuntimeError(self._closed_message())
                if not self.inbox:  # else the loop is already due to take the inbox: no wake-up
                    self.loop.call_soon_threadsafe(self._start_inbox)
            except RuntimeError:  # closing, or the loop closed under us
                for coro in coros:
                    coro.close()
                raise
            self.inbox.extend(zip(coros, futures, strict=True))
            self.futures.update(futures)
        for future in futures:  # outside the lock, as in submit
            future.add_done_callback(self._forget)
        return futures

    def _start_inbox(self) -> None:
        """On the loop thread: a task for each coroutine in the inbox, in order, its outcome
        copied to its future."""
        with self.lock:
            inbox, self.inbox = self.inbox, []
        for coro, future in inbox:
            if future.done():  # failed by the loop's wind-down before it started
                coro.close()
                continue
            task = self.loop.create_task(coro)
            self.started.add(task)  # the loop keeps only a weak reference to a task
            task.add_done_callback(self.started.discard)
            task.add_done_callback(functools.partial(_settle, future))

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self.lock:
            self.futures.discard(future)

    def add_closer(self, closer: Closer) -> None:
        with self.lock:
            if self.closing or self.closers is None:
                raise RuntimeError(f"{self._closed_message()}: too late to add a closer")
            self.closers.append(closer)

    def is_closed(self) -> bool:
        with self.lock:
            return self.closing

    def close(self, timeout: float | None, *, warn: bool = True) -> None:
        if self.pid != os.getpid():
            # A forked child: the loop runs in the parent (its self-pipe is shared with it),
            # and a lock may have been held at the fork. Refuse new work, touch nothing.
            self.closing = True
            return
        with self.lock:
            if self.closing:
                return
            self._begin_closing(timeout, warn)
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # the loop is closed already: its thread has ended
            pass
        assert self.thread is not None
        join_threads([self.thread], timeout, warn=warn)

    def _begin_closing(self, timeout: float | None, warn: bool) -> None:
        """Under ``lock``: refuse new work and fix the deadline of the wind-down."""
        self.closing = True
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.warn = warn

    def _closed_message(self) -> str:
        if self.error is not None:
            return f"EventLoopThread {self.name!r} is closed: its loop died of {self.error!r}"
        return f"EventLoopThread {self.name!r} is closed"

    # -- the loop thread ----------------------------------------------------------------------
    def died(self, exc: BaseException) -> None:
        with self.lock:
            self.error = exc
            if not self.closing:
                self._begin_closing(EXIT_JOIN_TIMEOUT, True)
        warnings.warn(
            f"event-loop thread {self.name!r} stopped: {exc!r} escaped its loop; its pending "
            "coroutines are cancelled and it accepts no more work",
            RuntimeWarning,
            stacklevel=1,
        )

    def remaining(self) -> float | None:
        with self.lock:
            deadline = self.deadline
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def take_closers(self) -> list[Closer]:
        with self.lock:
            closers, self.closers = self.closers, None
        return closers or []

    def should_warn(self) -> bool:
        with self.lock:
            return self.warn

    def fail_pending(self) -> None:
        """Fail every future ``submit`` returned that is not done: its waiter wakes."""
        with self.lock:
            self.closing = True
            futures, self.futures = list(self.futures), set()
            never_started, self.inbox = self.inbox, []
            cause = self.error
        for coro, _ in never_started:
            coro.close()
        for future in futures:
            if future.done():
                continue
            error = RuntimeError(
                f"EventLoopThread {self.name!r} closed before this coroutine finished"
                + (f": its loop died of {cause!r}" if cause is not None else "")
            )
            error.__cause__ = cause
            try:
                future.set_exception(error)
            except concurrent.futures.InvalidStateError:  # cancelled or finished meanwhile
                pass


def _settle(future: concurrent.futures.Future[T], task: asyncio.Task[T]) -> None:
    """``task`` is done: its result, exception or cancellation onto ``future`` (as
    ``run_coroutine_threadsafe`` chains them)."""
    try:
        if task.cancelled():
            future.cancel()
        elif (error := task.exception()) is not None:
            future.set_exception(error)
        else:
            future.set_result(task.result())
    except concurrent.futures.InvalidStateError:  # failed by the wind-down meanwhile
        pass


def _run_loop(state: _LoopState, started: threading.Event) -> None:
    loop = state.loop
    asyncio.set_event_loop(loop)
    loop.call_soon(started.set)
    try:
        try:
            loop.run_forever()
        except BaseException as exc:  # SystemExit/KeyboardInterrupt from a task or callback
            state.died(exc)
        _wind_down(state)
    finally:
        state.fail_pending()
        loop.close()


def _wind_down(state: _LoopState) -> None:
    """On the loop thread, after ``run_forever`` returned: closers, tasks, async generators,
    the default executor, each within what is left of the close timeout."""
    loop = state.loop
    closers = state.take_closers()
    if closers:
        _run_guarded(state, _await_closers(state, closers), "awaiting its closers")
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        # Once each: a second cancel() would interrupt the clean-up of a task already
        # cancelled by its owner (an ``await`` in its ``finally``).
        if not task.cancelling():
            task.cancel()
    if tasks:
        _run_guarded(state, asyncio.wait(tasks, timeout=state.remaining()), "cancelling its tasks")
        stuck = [t for t in tasks if not t.done()]
        if stuck and state.should_warn():
            warnings.warn(
                f"event-loop thread {state.name!r}: {len(stuck)} task(s) still running {state.timeout}s "
                "after close() began, cancelled but not finished; abandoned",
                RuntimeWarning,
                stacklevel=1,
            )
    _run_guarded(state, _within(loop.shutdown_asyncgens(), state.remaining()), "closing async generators")
    _run_guarded(state, _within(loop.shutdown_default_executor(), state.remaining()), "closing its executor")


def _run_guarded(state: _LoopState, aw: Awaitable[Any], doing: str) -> None:
    try:
        state.loop.run_until_complete(aw)
    except BaseException as exc:  # never let clean-up keep the loop from closing
        warnings.warn(f"event-loop thread {state.name!r}: {exc!r} while {doing}", RuntimeWarning, stacklevel=1)


async def _within(aw: Awaitable[Any], timeout: float | None) -> bool:
    """Await ``aw`` for at most ``timeout`` seconds, then cancel it without waiting
    (``asyncio.wait_for`` would wait for a cancellation that may never end)."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        return False
    return True


async def _call_closer(closer: Closer) -> BaseException | None:
    try:
        await closer()
    except asyncio.CancelledError:
        if asyncio.current_task().cancelling():  # type: ignore[union-attr]
            raise
        return asyncio.CancelledError("the closer raised CancelledError")
    except BaseException as exc:  # SystemExit too: it must not escape the loop
        return exc
    return None


async def _await_closers(state: _LoopState, closers: list[Closer]) -> None:
    for closer in closers:
        task = asyncio.ensure_future(_call_closer(closer))
        done, _ = await asyncio.wait({task}, timeout=state.remaining())
        if not done:
            task.cancel()
            if state.should_warn():
                warnings.warn(
                    f"event-loop thread {state.name!r}: closer {closer!r} still running {state.timeout}s "
                    "after close() began; cancelled",
                    RuntimeWarning,
                    stacklevel=1,
                )
            continue
        error = task.result()
        if error is not None:
            warnings.warn(
                f"event-loop thread {state.name!r}: closer {closer!r} failed: {error!r}",
                RuntimeWarning,
                stacklevel=1,
            )
