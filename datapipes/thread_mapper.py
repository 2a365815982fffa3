"""ThreadMapper: applies a function to each item on a pool of threads."""

from __future__ import annotations

import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, close_source, join_threads, register_for_exit, start_thread
from datapipes._progress import Progress
from datapipes._validate import check_choice, check_non_negative_int, check_positive_int, check_timeout
from datapipes.base import Node, NodeIterator, StateDict, add_item_note
from datapipes.stats import StatsCounter
from datapipes.thread_pool import ThreadPool

__all__ = ["ThreadMapper"]

T = TypeVar("T")
U = TypeVar("U")

#: With ``in_order=False``, how many times the node's capacity the newest item pulled may run
#: ahead of the oldest unfinished one; this keeps the checkpoint state bounded when one item
#: is very slow.
OUT_OF_ORDER_LEAD = 4

#: Seconds a Ctrl-C in ``next()`` waits for workers before it propagates.
INTERRUPT_JOIN_TIMEOUT = 0.5


class ThreadMapper(Node[U]):
    """Yields ``fn(item)`` for each source item, computed on ``num_threads`` threads.

    Bounds: at most ``num_threads`` calls of ``fn`` run at once, and at most ``max_pending``
    results are finished but not yet consumed, reorder buffer included (a thread whose result
    does not fit waits with it and takes no new item; with ``max_pending=0`` one result at a
    time is handed over, so ``stats()["peak_buffered"] <= max(max_pending, 1)``). At most
    ``num_threads + max_pending`` items taken from the source are not yet consumed, however
    slow the consumer or any item. ``max_pending`` defaults to ``num_threads``.

    Order: ``in_order=True`` yields in source order; ``in_order=False`` yields in completion
    order. Both yield every item exactly once.

    Concurrency: ``fn`` runs concurrently with itself on up to ``num_threads`` threads (it
    must be thread-safe); the source is pulled by one thread at a time, under a lock.

    Errors: an exception from ``fn`` (or from the source) is raised by ``next()`` at that
    item's place, as the same exception object with a note naming this node and the item;
    the next ``next()`` goes on with the following item. ``on_error="skip"`` drops items whose
    ``fn`` raised and counts them in ``stats()["skipped"]``. ``timeout`` (seconds) makes
    ``next()`` raise ``TimeoutError`` naming the item it waited for.

    Lifecycle: each ``iter()`` starts the threads of one epoch (or runs them on ``pool``,
    which its owner keeps across epochs). Exhaustion, ``close()``, ``with``, garbage
    collection of the iterator and interpreter exit stop and join them; a call in progress
    is waited for (up to 30 s, then a warning names the thread).
    """

    def __init__(
        self,
        source: Node[T] | Iterable[T],
        fn: Callable[[T], U],
        *,
        num_threads: int = 1,
        max_pending: int | None = None,
        in_order: bool = True,
        on_error: Literal["raise", "skip"] = "raise",
        timeout: float | None = None,
        pool: ThreadPool | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(source, name=name)
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.num_threads = check_positive_int("num_threads", num_threads)
        self.max_pending = num_threads if max_pending is None else check_non_negative_int("max_pending", max_pending)
        self.in_order = bool(in_order)
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self.timeout = check_timeout("timeout", timeout)
        if pool is not None and pool.num_threads < num_threads:
            raise ValueError(f"pool has {pool.num_threads} threads, fewer than num_threads={num_threads}")
        self.pool = pool

    def _open(self, state: StateDict | None) -> NodeIterator[U]:
        return _ThreadMapperIterator(self, state)


class _Entry:
    __slots__ = ("error", "seq", "skipped", "value")

    def __init__(self, seq: int, value: Any, error: BaseException | None, skipped: bool) -> None:
        self.seq = seq
        self.value = value
        self.error = error
        self.skipped = skipped


class _MapRun(Generic[U]):
    """The run state of one epoch. Worker loops reference this, never the public iterator,
    so dropping the iterator lets its finalizer stop them."""

    def __init__(self, node: ThreadMapper[U], state: StateDict | None) -> None:
        self.name = node.name
        self.fn = node.fn
        self.in_order = node.in_order
        self.skip_errors = node.on_error == "skip"
        self.timeout = node.timeout
        self.stats: StatsCounter = node._stats
        self.source = node._open_source(state)
        self.capacity = node.num_threads + node.max_pending
        self.window = max(node.max_pending, 1)
        self.max_lead = self.capacity if node.in_order else OUT_OF_ORDER_LEAD * self.capacity
        # One lock guards the state below; two conditions on it, so that a wake-up goes only
        # to threads that may proceed: ``cond`` for the consumer (a result is ready, the epoch
        # ended, workers exited), ``space`` for workers (room to pull or to deposit).
        lock = threading.RLock()
        self.cond = threading.Condition(lock)
        self.space = threading.Condition(lock)
        self.pull_lock = threading.Lock()
        # Guarded by cond:
        self.progress = Progress(self.source.state_dict(), state.get("skip", ()) if state else ())
        self.outstanding = 0  # pulled and not yet handed over or skipped
        self.next_seq = 0
        self.total: int | None = None  # number of items, once the source is exhausted
        self.finished = 0
        self.next_out = 0
        self.ready_by_seq: dict[int, _Entry] = {}
        self.ready_fifo: deque[_Entry] = deque()
        self.closed = False
        self.live_workers = node.num_threads
        self.worker_idents: set[int] = set()
        self.threads: list[threading.Thread] = []
        register_for_exit(self)
        if node.pool is not None:
            for _ in range(node.num_threads):
                node.pool.submit(self.work)
        else:
            self.threads = [start_thread(self.work, f"{self.name}-{i}") for i in range(node.num_threads)]

    # -- worker side -------------------------------------------------------------------------
    def work(self) -> None:
        ident = threading.get_ident()
        with self.cond:
            self.worker_idents.add(ident)
        try:
            while self._work_one():
                pass
        finally:
            with self.cond:
                self.live_workers -= 1
                self.worker_idents.discard(ident)
                self.cond.notify_all()
                self.space.notify_all()

    def _work_one(self) -> bool:
        cond = self.cond
        with self.pull_lock:
            with cond:
                while not self.closed and self.total is None and (
                    self.outstanding >= self.capacity or self.next_seq - self.progress.frontier >= self.max_lead
                ):
                    self.space.wait()
                if self.closed or self.total is not None:
                    return False
                self.outstanding += 1
                seq = self.next_seq
            start = time.perf_counter()
            item: Any = None
            error: BaseException | None = None
            try:
                item = next(self.source)
            except StopIteration:
                with cond:
                    self.outstanding -= 1
                    self.total = seq
                    cond.notify_all()
                    self.space.notify_all()
                return False
            except BaseException as exc:  # a source error is an item: raised at its place
                error = exc
            snapshot = self.source.state_dict()
            waited = time.perf_counter() - start
            with cond:
                self.next_seq = seq + 1
                skipped = self.progress.pulled(seq, snapshot)
        value: Any = None
        busy = 0.0
        failed = False
        if error is None and not skipped:
            start = time.perf_counter()
            try:
                value = self.fn(item)
            except BaseException as exc:
                add_item_note(exc, self.name, seq, item)
                error, skipped, failed = exc, self.skip_errors, True
            busy = time.perf_counter() - start
        return self._deposit(_Entry(seq, value, error, skipped), waited, busy, failed)

    def _deposit(self, entry: _Entry, waited: float, busy: float, failed: bool) -> bool:
        cond = self.cond
        buffered = 0
        with cond:
            start = time.perf_counter()
            if self.in_order:
                while not self.closed and entry.seq >= self.next_out + self.window:
                    self.space.wait()
                if not self.closed:
                    self.ready_by_seq[entry.seq] = entry
                    buffered = len(self.ready_by_seq)
            else:
                while not self.closed and len(self.ready_fifo) >= self.window:
                    self.space.wait()
                if not self.closed:
                    self.ready_fifo.append(entry)
                    buffered = len(self.ready_fifo)
            deposited = not self.closed
            if deposited:
                cond.notify_all()  # only the consumer waits on cond (and shutdown, for workers)
        # One update per item: counting stays cheap when nobody reads it.
        self.stats.add(
            items_in=1,
            wait_source_s=waited,
            busy_s=busy,
            errors=failed,
            skipped=failed and self.skip_errors,
            wait_consumer_s=time.perf_counter() - start,
            peak_buffered=buffered,
        )
        return deposited

    # -- consumer side -----------------------------------------------------------------------
    def _take(self) -> _Entry | None:
        if self.in_order:
            entry = self.ready_by_seq.pop(self.next_out, None)
            if entry is not None:
                self.next_out += 1
            return entry
        return self.ready_fifo.popleft() if self.ready_fifo else None

    def next(self) -> U:
        cond = self.cond
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        with cond:
            while True:
                entry = self._take()
                if entry is not None:
                    self.outstanding -= 1
                    self.finished += 1
                    self.progress.finished(entry.seq)
                    self.space.notify_all()
                    if entry.skipped:
                        continue
                    break
                if self.closed or (self.total is not None and self.finished >= self.total):
                    raise StopIteration
                if deadline is None:
                    cond.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not cond.wait(remaining):
                        if self._take_would_succeed():
                            continue
                        waiting_for = self.next_out if self.in_order else f"after {self.finished} finished"
                        raise TimeoutError(
                            f"{self.name}: no result for item #{waiting_for} of this epoch within timeout={self.timeout}s"
                        )
        self.stats.add(items_out=1)
        if entry.error is not None:
            raise entry.error
        return entry.value  # type: ignore[no-any-return]

    def _take_would_succeed(self) -> bool:
        return (self.next_out in self.ready_by_seq) if self.in_order else bool(self.ready_fifo)

    def state_dict(self) -> StateDict:
        with self.cond:
            return self.progress.state()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> None:
        """Stop the workers, close the source, and wait for the workers (``timeout``). Idempotent.

        A worker still inside ``fn`` after ``timeout`` exits as soon as that call returns."""
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.ready_by_seq.clear()
            self.ready_fifo.clear()
            self.cond.notify_all()
            self.space.notify_all()
        # Closing the source also wakes a worker blocked inside next(source).
        idle = self.pull_lock.acquire(blocking=False)
        try:
            close_source(self.source, busy=not idle)
        finally:
            if idle:
                self.pull_lock.release()
        if self.threads:
            join_threads(self.threads, timeout, warn=warn)
        else:  # running on a pool: wait for our loops to return
            deadline = None if timeout is None else time.monotonic() + timeout
            me = threading.get_ident()
            with self.cond:
                while self.live_workers - (me in self.worker_idents) > 0:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        if not warn:
                            break
                        warnings.warn(
                            f"{self.name}: {self.live_workers} worker(s) still in a call after close() waited {timeout}s",
                            RuntimeWarning,
                            stacklevel=2,
                        )
                        break
                    self.cond.wait(remaining)
        if not idle:
            close_source(self.source, busy=False)


class _ThreadMapperIterator(NodeIterator[U]):
    def __init__(self, node: ThreadMapper[U], state: StateDict | None) -> None:
        self._run = _MapRun(node, state)
        self._finalizer = weakref.finalize(self, self._run.shutdown)
        self._finalizer.atexit = False  # the exit hook stops the run, with a shorter timeout

    def __next__(self) -> U:
        try:
            return self._run.next()
        except StopIteration:
            self.close()
            raise
        except KeyboardInterrupt:
            # Stop at once: don't wait for calls in progress, they end on their own.
            self._run.shutdown(timeout=INTERRUPT_JOIN_TIMEOUT, warn=False)
            raise

    def state_dict(self) -> StateDict:
        return self._run.state_dict()

    def close(self) -> None:
        self._finalizer()
