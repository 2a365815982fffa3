"""ThreadPool: named worker threads kept across epochs by the object that owns them."""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, join_threads, register_for_exit, start_thread
from datapipes._validate import check_positive_int

__all__ = ["ThreadPool"]

_STOP = object()


class ThreadPool:
    """``num_threads`` daemon threads named ``f"{name}-{i}"`` that run submitted callables.

    Concurrent nodes run their worker loops here when they are given a pool (a
    :class:`~torch_threadloader.ThreadLoader` keeps one across epochs so an epoch starts
    without creating threads); without one they start threads of their own per epoch.
    ``initializer(i)`` runs once in thread ``i`` before any task. A task's exception is not
    the pool's business: tasks catch and hand over their own errors.

    Bounded: at most ``2 * num_threads`` submitted tasks wait for a thread; ``submit`` blocks
    beyond that. ``close()`` lets running tasks finish, stops every thread and joins it; it is
    idempotent and also runs at interpreter exit. Daemon threads (unlike
    ``concurrent.futures.ThreadPoolExecutor``'s) never hold up interpreter exit behind a task
    blocked on a full buffer.
    """

    def __init__(
        self, num_threads: int, *, name: str = "datapipes-pool", initializer: Callable[[int], object] | None = None
    ) -> None:
        self.num_threads = check_positive_int("num_threads", num_threads)
        self.name = name
        self._tasks: queue.Queue[object] = queue.Queue(maxsize=2 * num_threads)
        self._initializer = initializer
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [start_thread(self._make_worker(i), f"{name}-{i}") for i in range(num_threads)]
        # Dropping the pool without close() still stops its threads: they hold no reference to it.
        self._finalizer = weakref.finalize(self, _stop_threads, self._tasks, self._threads, DEFAULT_JOIN_TIMEOUT)
        self._finalizer.atexit = False  # the exit hook closes it, with a shorter timeout
        register_for_exit(self)

    def _make_worker(self, index: int) -> Callable[[], None]:
        tasks, initializer = self._tasks, self._initializer

        def worker() -> None:
            if initializer is not None:
                initializer(index)
            while True:
                task = tasks.get()
                if task is _STOP:
                    return
                task()  # type: ignore[operator]

        return worker

    def submit(self, task: Callable[[], object]) -> None:
        """Run ``task()`` on the next free thread."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"ThreadPool {self.name!r} is closed")
        self._tasks.put(task)

    def close(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> None:
        """Stop and join every thread once the tasks already submitted have run; a thread
        still in a task after ``timeout`` exits when the task returns (with a warning unless
        ``warn=False``)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._finalizer.detach()
        _stop_threads(self._tasks, self._threads, timeout, warn=warn)

    shutdown = close

    def __enter__(self) -> ThreadPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _stop_threads(
    tasks: queue.Queue[object], threads: list[threading.Thread], timeout: float | None, *, warn: bool = True
) -> None:
    for _ in threads:
        tasks.put(_STOP)
    join_threads(threads, timeout, warn=warn)
