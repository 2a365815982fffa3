"""EventLoopThread: one asyncio event loop running on one named thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, join_threads, register_for_exit, start_thread

__all__ = ["EventLoopThread"]

T = TypeVar("T")


class EventLoopThread:
    """An asyncio loop on a daemon thread named ``name``, for coroutines submitted from
    other threads (``submit`` returns a ``concurrent.futures.Future``).

    Owned by whoever made it (an :class:`~datapipes.AsyncFetcher`, or a loader that shares
    one loop across its fetchers and epochs). ``close()`` cancels every task still on the
    loop, awaits them, shuts down async generators, stops the loop and joins the thread; it
    is idempotent, and also runs when the object is garbage-collected or at interpreter exit.
    """

    def __init__(self, name: str = "datapipes-loop") -> None:
        self.name = name
        self.loop = loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._closed = False
        started = threading.Event()
        self._thread = start_thread(lambda: _run_loop(loop, started), name)
        started.wait()
        self._finalizer = weakref.finalize(self, _stop_loop, self.loop, self._thread, DEFAULT_JOIN_TIMEOUT)
        self._finalizer.atexit = False  # the exit hook closes it, with a shorter timeout
        register_for_exit(self)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; thread-safe."""
        with self._lock:
            if self._closed:
                coro.close()
                raise RuntimeError(f"EventLoopThread {self.name!r} is closed")
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from another thread only)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("EventLoopThread.run() called from its own loop thread would deadlock")
        return self.submit(coro).result(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._finalizer.detach()
        _stop_loop(self.loop, self._thread, timeout)

    shutdown = close


def _run_loop(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(started.set)
    try:
        loop.run_forever()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, timeout: float | None) -> None:
    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:  # closed in between
            pass
    join_threads([thread], timeout)
