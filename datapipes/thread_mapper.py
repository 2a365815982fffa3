"""ThreadMapper: applies a function to each item on worker threads, as torch assigns work to workers."""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

from datapipes._lifecycle import (
    DEFAULT_JOIN_TIMEOUT,
    INTERRUPT_JOIN_TIMEOUT,
    Deadline,
    close_source,
    register_for_exit,
    track_thread,
    warn_stuck,
)
from datapipes._progress import Progress
from datapipes._run import RunIterator
from datapipes._validate import check_choice, check_non_negative_int, check_positive_int, check_timeout
from datapipes.base import Node, NodeIterator, StateDict, add_item_note
from datapipes.errors import EpochClosedError, NodeTimeoutError
from datapipes.stats import StatsCounter
from datapipes.thread_pool import ThreadPool

__all__ = ["ThreadMapper"]

T = TypeVar("T")
U = TypeVar("U")

#: With ``in_order=False``, how many times the node's capacity the newest item pulled may run
#: ahead of the oldest unfinished one; this keeps the checkpoint state bounded when one item
#: is very slow.
OUT_OF_ORDER_LEAD = 4

_STOP = object()  # in a worker's inbox: return
_WAKE = object()  # in the results queue: the run was closed, wake the consumer
_MISSING = object()
_FAILED = object()  # in the results queue: a worker thread could not be started

# What a worker reports for an item.
_OK, _ERROR, _ENDED = 0, 1, 2


class ThreadMapper(Node[U]):
    """Yields ``fn(item)`` for each source item, computed on ``num_threads`` worker threads.

    Work is given out as torch's ``DataLoader`` gives batches to its workers: the source is
    pulled in the consumer's thread (when the epoch opens, ``num_threads + max_pending``
    items, then one per item consumed), and item ``i`` goes to thread ``i % num_threads``
    (``in_order=True``), or to the next thread with fewer than its share of the items in
    flight (``in_order=False``). So a seeded source draws its random numbers in the
    consumer's thread at the same points as torch's sampler, and each thread sees the same
    items whatever the timing.

    Bounds: at most ``num_threads`` calls run at once, and at most ``num_threads +
    max_pending`` items are in the node (given to a thread, running, or finished and waiting
    for the consumer, reorder buffer included), however slow the consumer or any item.
    ``max_pending`` defaults to ``num_threads``.

    Order: ``in_order=True`` yields in source order; ``in_order=False`` yields in completion
    order. Both yield every item exactly once.

    ``first_thread``: the thread the first item goes to (then the next in turn), so a resumed
    epoch can go on with the thread whose turn was next.

    With ``worker_of`` (``in_order=True``), item ``x`` goes to thread ``worker_of(x) %
    num_threads`` instead of the next in turn (a loader resuming mid-epoch keeps batch ``p`` on
    worker ``p % num_workers``, as the uninterrupted epoch had it).

    Per-thread functions: with ``worker_fn``, each thread calls ``worker_fn(i)`` once per
    epoch, on itself, before its first item, and applies the function it returns (``fn`` must
    then be None). With ``stop_ends_share=True``, a function raising ``StopIteration`` ends
    that thread's share of the epoch: its items still queued are dropped and later ones go to
    the other threads (how torch's workers end an ``IterableDataset``); the epoch ends when
    every thread has. Otherwise ``StopIteration`` is an error like any other.

    Errors: an exception from ``fn`` (or from the source, or from ``worker_fn``) is raised by
    ``next()`` at its item's place, as the same object with a note naming this node and the
    item; the next ``next()`` goes on with the following item. ``on_error="skip"`` drops
    items whose ``fn`` raised and counts them in ``stats()["skipped"]``. ``timeout`` makes a
    ``next()`` that waited that long raise :class:`~datapipes.NodeTimeoutError` naming the
    item; the item stays in place, so the next ``next()`` waits for it again.

    Lifecycle: each ``iter()`` starts the threads of one epoch (or runs them on ``pool``,
    which its owner keeps across epochs; on a ``pinned`` pool, thread ``i``'s loop runs on the
    pool's thread ``i`` in every epoch). Exhaustion, ``close()``, ``with``, garbage
    collection of the iterator and interpreter exit stop them within one bounded wait (a
    thread still in a call after it is named once in a warning, and exits when the call
    returns). A ``next()`` waiting when another thread closes the epoch raises
    :class:`~datapipes.EpochClosedError`; a ``next()`` after ``close()`` raises
    ``StopIteration``.
    """

    def __init__(
        self,
        source: Node[T] | Iterable[T],
        fn: Callable[[T], U] | None = None,
        *,
        num_threads: int = 1,
        max_pending: int | None = None,
        in_order: bool = True,
        on_error: Literal["raise", "skip"] = "raise",
        timeout: float | None = None,
        pool: ThreadPool | None = None,
        name: str | None = None,
        worker_fn: Callable[[int], Callable[[T], U]] | None = None,
        stop_ends_share: bool = False,
        worker_of: Callable[[T], int] | None = None,
        first_thread: int = 0,
    ) -> None:
        super().__init__(source, name=name)
        self.first_thread = check_non_negative_int("first_thread", first_thread)
        if worker_of is not None and not callable(worker_of):
            raise TypeError(f"worker_of must be callable, got {type(worker_of).__name__}")
        self.worker_of = worker_of
        if (fn is None) == (worker_fn is None):
            raise TypeError("pass exactly one of fn (one function for every thread) and worker_fn (one per thread)")
        if fn is not None and not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if worker_fn is not None and not callable(worker_fn):
            raise TypeError(f"worker_fn must be callable, got {type(worker_fn).__name__}")
        self.fn = fn
        self.worker_fn = worker_fn
        self.stop_ends_share = bool(stop_ends_share)
        self.num_threads = check_positive_int("num_threads", num_threads)
        self.max_pending = num_threads if max_pending is None else check_non_negative_int("max_pending", max_pending)
        self.in_order = bool(in_order)
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self.timeout = check_timeout("timeout", timeout)
        if pool is not None and pool.num_threads < num_threads:
            raise ValueError(f"pool has {pool.num_threads} threads, fewer than num_threads={num_threads}")
        self.pool = pool

    def _open(self, state: StateDict | None) -> NodeIterator[U]:
        return RunIterator(_MapRun(self, state))


class _MapRun(Generic[U]):
    """The run state of one epoch. Worker loops reference this, never the public iterator,
    so dropping the iterator lets its finalizer stop them.

    Ownership: the consumer's thread (``next``) owns the source, the dispatch and the reorder
    buffer; workers own their inbox's items while they run them and hand results over through
    ``results`` (a queue, so no lock is held across a call). ``lock`` guards what another
    thread may read or change: ``closed``, ``progress`` (for ``state_dict``) and ``live``.
    """

    def __init__(self, node: ThreadMapper[U], state: StateDict | None) -> None:
        self.name = node.name
        self.fn = node.fn
        self.worker_fn = node.worker_fn
        self.worker_of = node.worker_of if node.in_order else None
        self.stop_ends_share = node.stop_ends_share
        self.pid = os.getpid()
        self.stopping = threading.Event()  # set first by shutdown: workers skip what is queued
        self.in_order = node.in_order
        self.skip_errors = node.on_error == "skip"
        self.timeout = node.timeout
        self.stats: StatsCounter = node._stats
        n = node.num_threads
        self.num_threads = n
        self.capacity = n + node.max_pending
        self.share = max(self.capacity // n, 1)  # in_order=False: items in flight per thread
        self.max_lead = self.capacity if node.in_order else OUT_OF_ORDER_LEAD * self.capacity
        self.lock = threading.Lock()
        self.exited = threading.Condition(self.lock)
        self.closed = False
        self.live = n
        self.busy: dict[int, str] = {}  # worker index -> thread name, while in a call (set and popped by that worker)
        self.idents: set[int] = set()  # the threads running this run's loops
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.inboxes: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(n)]
        # Owned by the consumer's thread:
        self.active = [True] * n
        self.owned: list[deque[int]] = [deque() for _ in range(n)]  # seqs given to each thread, in order
        first = node.first_thread % n
        self.cycle = itertools.chain(range(first, n), itertools.cycle(range(n)))
        self.ready: dict[int, tuple[int, Any, float]] = {}  # seq -> (kind, value, done_at), in order
        self.ready_fifo: deque[tuple[int, int, Any, float]] = deque()  # in_order=False
        self.items: dict[int, Any] = {}  # seq -> item, for notes and timeout errors
        self.outstanding = 0
        self.wait_source = 0.0  # seconds spent pulling the source, not yet counted
        self.peak = 0  # most results waiting at once
        self.next_seq = 0
        self.next_out = 0
        self.exhausted = False
        self.finished = False
        self.source = node._open_source(state)
        self.progress = Progress(self.source.state_dict(), state.get("skip", ()) if state else ())
        self.threads: list[threading.Thread] = []  # guarded by lock: workers start each other
        self.own_threads = node.pool is None
        self.start_error: BaseException | None = None
        register_for_exit(self)
        try:
            if node.pool is not None:
                for i in range(n):  # a pinned pool runs loop i on its thread i, every epoch
                    if node.pool.pinned:
                        node.pool.run_on(i, self.work, i)
                    else:
                        node.pool.run(self.work, i)
            else:
                # Thread i starts thread i + 1 first thing: Thread.start() waits until the new
                # thread runs, and the epoch's first batch should wait for one start, not n.
                self._start_worker(0)
            self.dispatch()
        except BaseException:
            self.shutdown(INTERRUPT_JOIN_TIMEOUT, warn=False)
            raise

    def _start_worker(self, index: int) -> None:
        thread = threading.Thread(target=self.work, args=(index,), name=f"{self.name}-{index}", daemon=True)
        track_thread(thread)
        with self.lock:
            if self.closed and index > 0:
                self.live -= self.num_threads - index  # never started: nothing to wait for
                self.exited.notify_all()
                return
            self.threads.append(thread)
        # Not under the lock: a garbage collection during start() may run a finalizer that
        # closes this run. A shutdown() meanwhile waits for it through ``live`` and joins
        # only the threads that started.
        try:
            thread.start()
        except BaseException as exc:  # e.g. "can't start new thread": the epoch cannot go on
            with self.lock:
                self.threads.remove(thread)
                self.start_error = exc
                self.live -= self.num_threads - index
                self.exited.notify_all()
            self.results.put(_FAILED)
            if index == 0:  # started by the consumer: its caller closes the run
                raise

    # -- worker side -------------------------------------------------------------------------
    def work(self, index: int) -> None:
        inbox, results, stats, busy_table = self.inboxes[index], self.results, self.stats, self.busy
        name = threading.current_thread().name
        with self.lock:
            self.idents.add(threading.get_ident())
        fn = self.fn
        init_error: BaseException | None = None
        ended = False
        try:
            # Start the next thread first: never after this one's set-up or an item, either of
            # which may be stuck.
            if self.own_threads and index + 1 < self.num_threads:
                self._start_worker(index + 1)
            if self.worker_fn is not None:
                try:
                    fn = self.worker_fn(index)
                except BaseException as exc:
                    init_error = exc
            while True:
                task = inbox.get()
                if task is _STOP:
                    return
                seq, item = task
                del task
                if ended or self.stopping.is_set():
                    continue  # share ended (the consumer drops its items), or the epoch is closing
                if init_error is not None:
                    results.put((seq, _ERROR, init_error, index, time.perf_counter()))
                    continue
                busy_table[index] = name  # one dict operation: atomic, also without the GIL
                start = time.perf_counter()
                try:
                    value = fn(item)  # type: ignore[misc]
                    kind = _OK
                except StopIteration as exc:
                    if self.stop_ends_share:
                        value, kind, ended = None, _ENDED, True
                    else:
                        add_item_note(exc, self.name, seq, item)
                        value, kind = exc, _ERROR
                except BaseException as exc:
                    add_item_note(exc, self.name, seq, item)
                    value, kind = exc, _ERROR
                busy = time.perf_counter() - start
                busy_table.pop(index, None)
                del item
                results.put((seq, kind, value, index, time.perf_counter()))
                del value
                stats.add(items_in=1, busy_s=busy, errors=kind == _ERROR)
        finally:
            with self.lock:
                self.live -= 1
                self.exited.notify_all()

    # -- consumer side -----------------------------------------------------------------------
    def dispatch(self) -> None:
        """Pull source items and give them to threads until the node is full (consumer's thread)."""
        while not self.exhausted and self.outstanding < self.capacity:
            if self.next_seq - self.progress.frontier >= self.max_lead:
                return
            worker = self._pick_worker()
            if worker is None:
                return
            seq = self.next_seq
            start = time.perf_counter()
            try:
                item = next(self.source)
                kind = _OK
            except StopIteration:
                self.exhausted = True
                return
            except Exception as exc:  # a source error is an item: raised at its place (Ctrl-C is not)
                item, kind = exc, _ERROR
            snapshot = self.source.state_dict()
            self.wait_source += time.perf_counter() - start
            with self.lock:
                if self.closed:
                    return
                self.next_seq = seq + 1
                skip = self.progress.pulled(seq, snapshot)
                if skip:
                    self.progress.finished(seq)
            if skip:
                continue
            self.outstanding += 1
            if kind == _ERROR:
                self._store(seq, _ERROR, item, time.perf_counter())
                continue
            if self.worker_of is not None:
                worker = self.worker_of(item) % self.num_threads
            self.items[seq] = item
            self.owned[worker].append(seq)
            self.inboxes[worker].put((seq, item))

    def _pick_worker(self) -> int | None:
        """torch's rule: the next active thread in turn; out of order, the next one with
        fewer than its share of items in flight."""
        active = self.active
        n_active = sum(active)
        if n_active == 0:
            self.exhausted = True
            return None
        share = max(self.capacity // n_active, 1)
        for _ in range(self.num_threads):
            worker = next(self.cycle)
            if active[worker] and (self.in_order or len(self.owned[worker]) < share):
                return worker
        return None

    def _store(self, seq: int, kind: int, value: Any, done_at: float) -> None:
        if self.in_order:
            self.ready[seq] = (kind, value, done_at)
            buffered = len(self.ready)
        else:
            self.ready_fifo.append((seq, kind, value, done_at))
            buffered = len(self.ready_fifo)
        if buffered > self.peak:
            self.peak = buffered

    def _receive(self, message: Any) -> None:
        seq, kind, value, worker, done_at = message
        owned = self.owned[worker]
        if kind == _ENDED:
            # torch: the worker's iterator is exhausted; its queued items are dropped.
            self.active[worker] = False
            dropped = list(owned)
            owned.clear()
            self.outstanding -= len(dropped)
            with self.lock:
                for s in dropped:
                    self.items.pop(s, None)
                    self.progress.finished(s)
            return
        owned.popleft()
        self._store(seq, kind, value, done_at)

    def _take(self) -> tuple[int, int, Any, float] | None:
        if self.in_order:
            entry = self.ready.pop(self.next_out, None)
            while entry is None and self.next_out < self.next_seq and self._dropped(self.next_out):
                self.next_out += 1
                entry = self.ready.pop(self.next_out, None)
            if entry is None:
                return None
            seq = self.next_out
            self.next_out += 1
            return seq, entry[0], entry[1], entry[2]
        return self.ready_fifo.popleft() if self.ready_fifo else None

    def _dropped(self, seq: int) -> bool:
        """In order: ``seq`` will never come (its thread's share ended, or a resume skips it)."""
        return seq not in self.items and seq not in self.ready

    def next(self) -> U:
        with self.lock:
            start_error = self.start_error
            if self.closed and start_error is None:
                raise StopIteration
        if start_error is not None:  # every next() says so: the epoch cannot be whole
            self.shutdown(INTERRUPT_JOIN_TIMEOUT, warn=False)
            raise RuntimeError(f"{self.name}: a worker thread could not be started") from start_error
        deadline = None if self.timeout is None else Deadline(self.timeout)
        results = self.results
        while True:
            taken = self._take()
            if taken is not None:
                seq, kind, value, done_at = taken
                item = self.items.pop(seq, _MISSING)
                self.outstanding -= 1
                with self.lock:
                    self.progress.finished(seq)
                self.dispatch()
                waited = time.perf_counter() - done_at
                # One counter update per item, with what the consumer's thread gathered.
                wait_source, self.wait_source = self.wait_source, 0.0
                skipped = kind != _OK and self.skip_errors and item is not _MISSING  # fn's error, not the source's
                self.stats.add(
                    items_out=not skipped,
                    skipped=skipped,
                    wait_consumer_s=waited,
                    wait_source_s=wait_source,
                    peak_buffered=self.peak,
                )
                if kind == _OK:
                    return value  # type: ignore[no-any-return]
                if skipped:
                    continue
                raise value
            if self.outstanding == 0:
                self.dispatch()
                if self.outstanding == 0:
                    self.finished = True
                    raise StopIteration
                continue
            try:
                message = results.get(timeout=None if deadline is None else deadline.remaining())
            except queue.Empty:
                raise self._timeout_error() from None
            while True:  # this one, then every result already there, for the reorder buffer
                if message is _WAKE:
                    raise EpochClosedError(f"{self.name}: the epoch was closed by another thread while next() waited")
                if message is _FAILED:
                    self.shutdown(INTERRUPT_JOIN_TIMEOUT, warn=False)
                    raise RuntimeError(f"{self.name}: a worker thread could not be started") from self.start_error
                self._receive(message)
                if results.empty():
                    break
                message = results.get_nowait()

    def waiting_for(self) -> int:
        """The item ``next()`` waits for: the next in order, else the oldest in flight."""
        if self.in_order:
            return self.next_out
        return min(self.items, default=self.next_seq)

    def _timeout_error(self) -> NodeTimeoutError:
        seq = self.waiting_for()
        return NodeTimeoutError(self.name, seq, self.items.get(seq), self.timeout)

    def state_dict(self) -> StateDict:
        with self.lock:
            return self.progress.state()

    def interrupt(self) -> None:
        """Ctrl-C: stop now; calls in progress end on their own."""
        self.shutdown(INTERRUPT_JOIN_TIMEOUT, warn=False)

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """Stop the workers and close the source, waiting at most ``timeout`` in all for
        calls in progress (a thread still in one is named in a warning); True when every
        worker stopped in time. Queued items are dropped, not run. Idempotent."""
        if self.pid != os.getpid():
            # A forked child has none of these threads, and a lock may have been held at the
            # fork by one of them: take nothing, wait for nothing.
            self.closed = True
            return True
        self.stopping.set()
        with self.lock:
            if self.closed:
                return self.live <= 0
            self.closed = True
        for inbox in self.inboxes:
            inbox.put(_STOP)
        self.results.put(_WAKE)
        deadline = Deadline(timeout)
        # The source belongs to the consumer's thread, which may be inside next(source)
        # right now when this runs on another thread: a generator refuses close() then.
        source_stopped = close_source(self.source, busy=True, timeout=deadline.remaining(), warn=warn)
        me = threading.current_thread()
        with self.lock:
            own_loop = me.ident in self.idents  # closed from inside fn: that loop cannot end now
            while self.live - own_loop > 0:
                remaining = deadline.remaining()
                if remaining is not None and remaining <= 0:
                    break
                self.exited.wait(remaining)
            stuck = sorted(set(self.busy.copy().values()) - {me.name})
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            # One not started yet (its start() is under way) stops as it starts: not joined
            # (join() refuses it); one that ended needs no join.
            if thread is not me and thread.name not in stuck and thread.is_alive():
                thread.join(deadline.remaining())
        if warn and stuck:
            warn_stuck([f"{self.name}: {n}" for n in stuck], timeout)
        self.ready.clear()
        self.ready_fifo.clear()
        self.items.clear()
        with self.lock:
            return source_stopped and self.live - own_loop <= 0
