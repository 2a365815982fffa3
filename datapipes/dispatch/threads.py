"""ThreadTransport: items run on worker threads, as torch assigns batches to its workers."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from datapipes._lifecycle import Deadline, track_thread, warn_stuck
from datapipes.base import add_item_note
from datapipes.dispatch.stall import Where
from datapipes.dispatch.transport import ALL_ENDED, ENDED, ERROR, OK, Results, StartFailed
from datapipes.stats import StatsCounter
from datapipes.thread_pool import ThreadPool

__all__ = ["ThreadTransport"]

_STOP = object()  # in a worker's inbox: return
_FEED = object()  # in a worker's inbox: run the dispatcher's feed (pull the next items)


class ThreadTransport:
    """``num_threads`` worker loops, each with an inbox of its own.

    Assignment (torch's rule): item ``i`` goes to the next active thread in turn (from
    ``first_thread``), or with ``worker_of`` to thread ``worker_of(item) % num_threads``;
    out of order, to the next thread with fewer than ``share`` items given to it.

    Per-thread functions: with ``worker_fn``, each thread calls ``worker_fn(i)`` once, on
    itself, before its first item. With ``stop_ends_share``, ``StopIteration`` from the
    function ends that thread's share (an ``ENDED`` message); otherwise it is an error.

    Threads: its own (thread ``i`` starts thread ``i + 1`` first thing, so the epoch's first
    item waits for one start, not ``n``) or ``pool``'s (a ``pinned`` pool runs loop ``i`` on
    its thread ``i``). ``lock`` guards ``live``, ``busy``, ``threads`` and ``idents``; the
    assignment bookkeeping (``active``, ``owned``) is the dispatcher's, under its lock.
    """

    def __init__(
        self,
        name: str,
        num_threads: int,
        *,
        fn: Callable[[Any], Any] | None,
        worker_fn: Callable[[int], Callable[[Any], Any]] | None,
        stop_ends_share: bool,
        worker_of: Callable[[Any], int] | None,
        first_thread: int,
        capacity: int,
        in_order: bool,
        pool: ThreadPool | None,
        stats: StatsCounter,
    ) -> None:
        self.name = name
        self.feeds_inline = False  # True: the ThreadMapper's feed_on_consumer
        self.feeds_at_delivery = True
        self.receives = False
        self.counts_items = True
        self.num_threads = n = num_threads
        self.fn = fn
        self.worker_fn = worker_fn
        self.stop_ends_share = stop_ends_share
        self.worker_of = worker_of
        self.in_order = in_order
        self.capacity = capacity  # out of order: a thread holds at most its share of it
        self.pool = pool
        self.stats = stats
        self.stopping = threading.Event()  # set first by close: workers skip what is queued
        self.lock = threading.Lock()
        self.exited = threading.Condition(self.lock)
        self.closed = False
        self.live = n
        self.busy: dict[int, str] = {}  # worker index -> thread name, while in a call (set and popped by that worker)
        self.names: dict[int, str] = {}  # worker index -> its thread's name (set once by that thread)
        self.idents: set[int] = set()
        self.threads: list[threading.Thread] = []
        self.inboxes: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(n)]
        self.results: Results = queue.SimpleQueue()
        # The dispatcher's, under its lock:
        self.active = [True] * n
        self.owned: list[deque[int]] = [deque() for _ in range(n)]  # seqs given to each thread, in order
        self.turn = first_thread % n  # the thread whose turn is next
        self.feed: Callable[[], None] | None = None
        # A feed asked for and not run yet: the first thread free runs it (the one it was queued
        # on may be stuck in a call); guarded by lock, read without it as a hint.
        self.feed_asked = False
        # Threads whose share ended (``stop_ends_share``); guarded by lock. When every share has
        # ended the threads return on their own, as the epoch's work is done, without waiting
        # for a consumer that may never come back (an error it caught ended its loop).
        self.shares_ended = 0

    # -- the dispatcher's calls ----------------------------------------------------------------
    def open(self, results: Results) -> None:
        self.results = results
        pool = self.pool
        if pool is None:
            self._start_worker(0)
            return
        for i in range(self.num_threads):  # a pinned pool runs loop i on its thread i, every epoch
            if pool.pinned:
                pool.run_on(i, self.work, i)
            else:
                pool.run(self.work, i)

    def _share(self) -> int:
        return max(self.capacity // max(sum(self.active), 1), 1)

    def _next_turn(self) -> int | None:
        """torch's rule: the next active thread in turn; out of order, the next one with
        fewer than its share of the items in flight."""
        active, owned, n = self.active, self.owned, self.num_threads
        share = self._share()
        for k in range(n):
            worker = (self.turn + k) % n
            if active[worker] and (self.in_order or len(owned[worker]) < share):
                return worker
        return None

    def room(self) -> int | None:
        if not any(self.active):
            return ALL_ENDED
        worker = self._next_turn()
        if worker is not None:
            self.turn = (worker + 1) % self.num_threads
        return worker

    def wake(self, feed: Callable[[], None]) -> bool:
        """The feed is queued on a thread not in a call if there is one (in order: the one
        whose turn is next, if it is free; out of order: the free one holding fewest), and
        runs on the first thread that gets to it, that one or another finishing a call: so a
        thread stuck in a call never holds it. A thread's items count as its own until the
        consumer takes in their results, so one that holds some may well be waiting idle."""
        active = [w for w in range(self.num_threads) if self.active[w]]
        if not active:
            return False
        busy = self.busy
        turn = self._next_turn() if self.in_order else None
        if turn is not None and turn not in busy:
            worker = turn
        else:
            worker = min(active, key=lambda w: (w in busy, len(self.owned[w])))
        with self.lock:
            if self.shares_ended == self.num_threads:
                return False  # the threads are stopping on their own: the dispatcher feeds itself
            self.feed = feed
            self.feed_asked = True
            self.inboxes[worker].put(_FEED)  # under the lock: before the stop, or not at all
        return True

    def receive(self, deadline: Deadline | None) -> bool:
        raise AssertionError("the worker threads put their own messages")

    def submit(self, worker: int, seq: int, item: Any) -> None:
        if self.worker_of is not None:
            try:
                worker = self.worker_of(item) % self.num_threads
            except Exception as exc:
                add_item_note(exc, self.name, seq, item)
                self.results.put((seq, ERROR, exc, -1, time.perf_counter()))
                return
        self.owned[worker].append(seq)
        if not self.active[worker]:
            # Its share ended after room() chose it (the dispatcher lets go of its lock while it
            # pulls the source): the item goes as the rest of that share went, and the ENDED
            # said again has the dispatcher drop it (its thread would skip it, saying nothing).
            self.results.put((seq, ENDED, None, worker, time.perf_counter()))
            return
        self.inboxes[worker].put((seq, item))

    def flush(self) -> None:
        """Nothing held: ``submit`` put each item in its thread's inbox."""

    def received(self, worker: int) -> bool:
        owned = self.owned[worker]
        owned.popleft()
        return not self.in_order and len(owned) == self._share() - 1

    def ended(self, worker: int) -> list[int]:
        self.active[worker] = False
        dropped = list(self.owned[worker])
        self.owned[worker].clear()
        return dropped

    def skips(self, error: BaseException) -> bool:
        return True

    def where(self, seqs: list[int]) -> dict[int, Where]:
        """Each item's thread: the oldest a thread holds is running if that thread is in a call,
        the others are queued behind the one before them (see :class:`~datapipes.dispatch.stall.Placement`)."""
        wanted = set(seqs)
        busy, names = self.busy.copy(), self.names.copy()
        out: dict[int, Where] = {}
        for worker, owned in enumerate(self.owned):
            before: int | None = None
            for seq in owned:
                if seq not in wanted:  # finished: in the consumer's buffer
                    continue
                if before is None:  # not running: its thread is setting up (worker_fn) or feeding
                    thread = busy.get(worker)
                    out[seq] = (
                        Where("running", worker, thread) if thread else Where("queued", worker, names.get(worker))
                    )
                else:
                    out[seq] = Where("queued", worker, behind=before)
                before = seq
        return out

    # -- the worker threads -------------------------------------------------------------------
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
        # closes this run. A close() meanwhile waits for it through ``live`` and joins only
        # the threads that started.
        try:
            thread.start()
        except BaseException as exc:  # e.g. "can't start new thread": the epoch cannot go on
            with self.lock:
                self.threads.remove(thread)
                self.live -= self.num_threads - index
                self.exited.notify_all()
            if index == 0:  # started by the consumer: the dispatcher closes the run
                raise
            self.results.put(StartFailed(exc))

    def work(self, index: int) -> None:
        with self.lock:
            self.idents.add(threading.get_ident())
        self.names[index] = threading.current_thread().name
        try:
            # Start the next thread first: never after this one's set-up or an item, either of
            # which may be stuck.
            if self.pool is None and index + 1 < self.num_threads:
                self._start_worker(index + 1)
            fn: Any = self.fn
            init_error: BaseException | None = None
            if self.worker_fn is not None:
                try:
                    fn = self.worker_fn(index)
                except BaseException as exc:
                    init_error = exc
            self._serve(index, fn, init_error)
        finally:
            with self.lock:
                self.live -= 1
                self.exited.notify_all()

    def _serve(self, index: int, fn: Callable[[Any], Any], init_error: BaseException | None) -> None:
        inbox, results, stats, busy_table = self.inboxes[index], self.results, self.stats, self.busy
        name = threading.current_thread().name
        ended = False
        while (task := inbox.get()) is not _STOP:
            if task is _FEED:
                self._run_feed(index, name)
                continue
            seq, item = task
            del task
            if ended or self.stopping.is_set():
                continue  # share ended (the dispatcher drops its items), or the epoch is closing
            if init_error is not None:
                results.put((seq, ERROR, init_error, index, time.perf_counter()))
                continue
            busy_table[index] = name  # one dict operation: atomic, also without the GIL
            start = time.perf_counter()
            try:
                value, kind = fn(item), OK
            except StopIteration as exc:
                if self.stop_ends_share:
                    value, kind, ended = None, ENDED, True
                else:
                    add_item_note(exc, self.name, seq, item)
                    value, kind = exc, ERROR
            except BaseException as exc:
                add_item_note(exc, self.name, seq, item)
                value, kind = exc, ERROR
            busy = time.perf_counter() - start
            busy_table.pop(index, None)
            del item
            results.put((seq, kind, value, index, time.perf_counter()))
            del value
            stats.add(items_in=kind != ENDED, busy_s=busy, errors=kind == ERROR)  # an end is no item
            if kind == ENDED:
                self._share_ended()
            if self.feed_asked:  # asked for meanwhile: here, not behind the call it was queued after
                self._run_feed(index, name)

    def _share_ended(self) -> None:
        """A thread's share ended; the last one stops every thread (each returns once its
        inbox reaches the stop: a feed queued before it still runs; :meth:`wake` queues none
        after it)."""
        with self.lock:
            self.shares_ended += 1
            if self.shares_ended == self.num_threads:
                for inbox in self.inboxes:
                    inbox.put(_STOP)

    def _run_feed(self, index: int, name: str) -> None:
        """Run the feed asked for, unless another thread has taken it (or the run closes)."""
        with self.lock:
            if not self.feed_asked:
                return
            self.feed_asked = False
            feed = self.feed
        if feed is not None and not self.stopping.is_set():
            self.busy[index] = name
            feed()
            self.busy.pop(index, None)

    def close(self, timeout: float | None, deadline: Deadline, *, warn: bool, interrupted: bool) -> bool:
        self.stopping.set()
        with self.lock:
            first = not self.closed
            self.closed = True
        if first:
            for inbox in self.inboxes:
                inbox.put(_STOP)
        me = threading.current_thread()
        with self.lock:
            own_loop = me.ident in self.idents  # closed from inside fn: that loop cannot end now
            while self.live - own_loop > 0:
                remaining = deadline.remaining()
                if remaining is not None and remaining <= 0:
                    break
                self.exited.wait(remaining)
            stuck = sorted(set(self.busy.copy().values()) - {me.name})
            threads = list(self.threads)
        for thread in threads:
            # One not started yet (its start() is under way) stops as it starts: not joined
            # (join() refuses it); one that ended needs no join.
            if thread is not me and thread.name not in stuck and thread.is_alive():
                thread.join(deadline.remaining())
        if first and warn and stuck:
            warn_stuck([f"{self.name}: {n}" for n in stuck], timeout)
        with self.lock:
            return self.live - own_loop <= 0
