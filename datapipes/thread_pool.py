"""ThreadPool: named daemon worker threads, owned by one object and closed within a bound."""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from datapipes._lifecycle import (
    DEFAULT_JOIN_TIMEOUT,
    Deadline,
    in_forked_child,
    join_threads,
    register_for_exit,
    start_thread,
    warn_stuck,
)
from datapipes._validate import check_positive_int

__all__ = ["ThreadPool"]

T = TypeVar("T")
R = TypeVar("R")

_STOP = object()


class ThreadPool:
    """``num_threads`` daemon threads named ``f"{name}-{i}"`` that run submitted callables.

    The one thread-pool type of the package: concurrent nodes run their worker loops on it
    when given one (a loader with ``persistent_workers=True`` keeps one across epochs), and
    :meth:`map_window` runs the items of one batch on it. ``initializer(i)`` runs once in
    thread ``i`` before any task.

    Bounded: at most ``2 * num_threads`` submitted tasks wait for a thread; ``submit`` blocks
    beyond that. ``pinned=True`` gives each thread an inbox of its own (two tasks at most):
    :meth:`run_on` runs a task on thread ``i`` itself (a loader's persistent worker ``i`` is
    then the same thread in every epoch, so its thread-local state stays its own), and
    ``submit``/``run`` go to the threads in turn. Errors: a task's exception is set on the future :meth:`submit` returns and is
    never lost. ``close()`` lets running tasks finish, stops and joins every thread within one
    ``timeout`` (a thread still in a call after it is named once in a warning and exits when
    the call returns); it is idempotent, runs on garbage collection and at interpreter exit,
    and never waits for the calling thread itself. Daemon threads (unlike
    ``concurrent.futures.ThreadPoolExecutor``'s) never hold up interpreter exit. In a forked
    child the pool has no threads: :attr:`alive` is False there and ``submit`` raises.
    """

    def __init__(
        self,
        num_threads: int,
        *,
        name: str = "datapipes-pool",
        initializer: Callable[[int], object] | None = None,
        pinned: bool = False,
    ) -> None:
        self.num_threads = check_positive_int("num_threads", num_threads)
        self.name = name
        self.pinned = bool(pinned)
        # Thread i takes its tasks from _inboxes[i]: one shared queue, or one each when pinned.
        shared: queue.Queue[Any] = queue.Queue(maxsize=2 * num_threads)
        self._inboxes: list[queue.Queue[Any]] = (
            [queue.Queue(maxsize=2) for _ in range(num_threads)] if pinned else [shared] * num_threads
        )
        self._turn = 0  # pinned: the thread the next submit() goes to (under _lock)
        self._initializer = initializer
        self._lock = threading.Lock()
        self._putting = 0  # submits past their closed check, still putting (under _lock)
        self._put_done = threading.Condition(self._lock)
        self._closed = False
        self._pid = os.getpid()
        self._threads = [start_thread(self._make_worker(i), f"{name}-{i}") for i in range(num_threads)]
        # Dropping the pool without close() still stops its threads: they hold no reference to it.
        self._finalizer = weakref.finalize(self, _stop_threads, self._inboxes, self._threads, DEFAULT_JOIN_TIMEOUT)
        self._finalizer.atexit = False  # the exit hook closes it, with a shorter timeout
        register_for_exit(self)

    def _make_worker(self, index: int) -> Callable[[], None]:
        tasks, initializer = self._inboxes[index], self._initializer

        def worker() -> None:
            if initializer is not None:
                initializer(index)
            while True:
                task = tasks.get()
                if task is _STOP:
                    return
                future, fn, args = task
                if future is None:
                    fn(*args)  # a loop that hands over its own errors
                elif future.set_running_or_notify_cancel():
                    try:
                        result = fn(*args)
                    except BaseException as exc:
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
                del task, future, fn, args  # drop references to the finished task's data

        return worker

    @property
    def alive(self) -> bool:
        """True until :meth:`close`, and never in a forked child (which has no threads)."""
        with self._lock:
            return not self._closed and not in_forked_child(self._pid)

    def submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        """Run ``fn(*args)`` on the next free thread; its result or exception goes to the future."""
        future: Future[R] = Future()
        self._put((future, fn, args))
        return future

    def run(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)``, a loop that catches and hands over its own errors, with no future."""
        self._put((None, fn, args))

    def run_on(self, index: int, fn: Callable[..., object], *args: Any) -> None:
        """Like :meth:`run`, on thread ``index`` itself (a ``pinned`` pool only)."""
        if not self.pinned:
            raise ValueError(f"ThreadPool {self.name!r} is not pinned: run_on() needs ThreadPool(..., pinned=True)")
        if not 0 <= index < self.num_threads:
            raise ValueError(f"index must be in [0, {self.num_threads}), got {index!r}")
        self._put((None, fn, args), index)

    def _put(self, task: tuple[Any, ...], index: int | None = None) -> None:
        with self._lock:
            if self._closed or in_forked_child(self._pid):
                raise RuntimeError(f"ThreadPool {self.name!r} is closed (or was made before this process forked)")
            if index is None:
                index, self._turn = self._turn, (self._turn + 1) % self.num_threads
            self._putting += 1
        try:
            self._inboxes[index].put(task)  # may block (a full inbox): not under the lock
        finally:
            with self._lock:
                self._putting -= 1
                if not self._putting:
                    self._put_done.notify_all()

    def map_window(self, fn: Callable[[T], R], keys: Iterable[T], limit: int) -> list[R]:
        """``[fn(k) for k in keys]`` in key order, with at most ``limit`` calls in flight: a call
        that ends, whichever it is, makes room for the next key at once (a slow call holds one
        place, not the window). Once a call has failed no key is started; the first error in key
        order is raised, and the calls not yet started are cancelled."""
        ended: queue.SimpleQueue[Future[R]] = queue.SimpleQueue()
        window: list[Future[R]] = []
        it = iter(keys)
        try:
            for key in it:
                window.append(self._watched(fn, key, ended))
                if len(window) >= limit:
                    break
            running = len(window)
            while running:
                done = ended.get()
                running -= 1
                if done.cancelled() or done.exception() is not None:
                    break  # start nothing more; the results below raise the first error in key order
                for key in it:
                    window.append(self._watched(fn, key, ended))
                    running += 1
                    break
            return [future.result() for future in window]
        finally:
            for future in window:
                future.cancel()

    def _watched(self, fn: Callable[[T], R], key: T, ended: queue.SimpleQueue[Future[R]]) -> Future[R]:
        future = self.submit(fn, key)
        future.add_done_callback(ended.put)
        return future

    def close(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> None:
        """Stop and join every thread once the tasks already submitted have run, within
        ``timeout`` seconds in all. Idempotent."""
        deadline = Deadline(timeout)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # A submit that passed its closed check lands before the stop, or its future
            # would never resolve; a thread stuck in a task keeps this within the deadline.
            self._put_done.wait_for(lambda: not self._putting, deadline.remaining())
        self._finalizer.detach()
        if in_forked_child(self._pid):
            return  # the threads stayed in the parent
        _stop_threads(self._inboxes, self._threads, deadline.remaining(), warn=warn)

    shutdown = close

    @property
    def threads(self) -> Sequence[threading.Thread]:
        return tuple(self._threads)

    def __enter__(self) -> ThreadPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ThreadPool({self.num_threads}, name={self.name!r})"


def _stop_threads(
    inboxes: list[queue.Queue[Any]], threads: list[threading.Thread], timeout: float | None, *, warn: bool = True
) -> None:
    deadline = Deadline(timeout)
    pinned = len({id(inbox) for inbox in inboxes}) > 1
    for inbox in inboxes:  # one stop per thread (a shared inbox gets them all)
        try:
            inbox.put(_STOP, timeout=deadline.remaining())
        except queue.Full:
            if pinned:
                continue  # that thread is stuck in a task: join_threads below names it
            break  # every thread is stuck in a task: join_threads below names them
    remaining = deadline.remaining()
    join_threads(threads, remaining, warn=False)
    stuck = [t.name for t in threads if t.is_alive() and t is not threading.current_thread()]
    if warn and stuck:
        warn_stuck(stuck, timeout)
