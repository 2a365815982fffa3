"""Dispatcher: one epoch of a concurrent node, over a :class:`~datapipes.dispatch.Transport`.

The one owner of the contract that every concurrent mode keeps: which item goes out when
(the bound on what is taken ahead), the order items come back in, the state to resume from,
``timeout``, stall reports, a close from another thread, a lost worker and a worker that could
not start.
A transport only runs items and reports their outcomes.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from typing import Any, Generic, TypeVar

from datapipes._lifecycle import (
    DEFAULT_JOIN_TIMEOUT,
    INTERRUPT_JOIN_TIMEOUT,
    Deadline,
    close_source,
    expired,
    pull_deadline,
    register_for_exit,
    wait_slice,
)
from datapipes._progress import Progress
from datapipes.base import NodeIterator, StateDict
from datapipes.dispatch.stall import StallClock, StallView, StallWatch, Where
from datapipes.dispatch.transport import ALL_ENDED, ENDED, ERROR, LOST, OK, Results, StartFailed, Transport
from datapipes.errors import EpochClosedError, NodeTimeoutError
from datapipes.stats import StatsCounter

__all__ = ["DispatchSettings", "Dispatcher"]

U = TypeVar("U")

_WAKE = object()  # on the results queue: the run was closed, wake the consumer
_END = object()  # on the results queue: nothing more will be submitted
_MISSING = object()
_SOURCE_ERROR = object()  # in ``items``: the source raised for this item (never skipped)
_IN_FLIGHT = Where("in flight")  # where an item is, for a transport that does not say
GATHER_S = 1.0  # how long a stall report waits for workers in other processes to say what they do


class _Fatal:
    """On the results queue: the source raised a ``BaseException`` on the feed thread."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class DispatchSettings:
    """How one dispatcher behaves: its bounds, order and error rules (one per node)."""

    __slots__ = (
        "capacity",
        "in_order",
        "max_lead",
        "name",
        "skip_errors",
        "stall",
        "timeout",
    )

    def __init__(
        self,
        name: str,
        *,
        capacity: int,
        max_lead: int,
        in_order: bool,
        timeout: float | None,
        skip_errors: bool,
        stall: StallWatch | None = None,
    ) -> None:
        self.name = name
        self.capacity = capacity  # items in the node: submitted, running or waiting for the consumer
        self.max_lead = max_lead  # how far the newest item pulled may be past the oldest unfinished
        self.in_order = in_order
        self.timeout = timeout
        self.skip_errors = skip_errors
        self.stall = stall  # called when one next() has waited stall.after seconds, and at each doubling


class Dispatcher(Generic[U]):
    """The run of one epoch: pulls ``source``, gives each item to ``transport`` and yields the
    outcomes (``RunIterator`` drives it).

    Bounds: at most ``capacity`` items are in the node (submitted, running, or finished and
    waiting for the consumer, reorder buffer included), and the newest item pulled is at
    most ``max_lead`` past the oldest unfinished one.

    Off the consumer's path: the epoch's first items are pulled in the thread that opens the
    epoch (where torch's ``DataLoader`` draws its first indices); from then on each item the
    consumer takes makes room for one more, and the transport is asked to :meth:`feed` it on
    a thread of its own (the worker the next item goes to): that thread pulls the source,
    snapshots it for ``state_dict()`` and submits while the consumer goes on. ``next()`` only
    takes a finished item, records it and wakes that thread. One feed runs at a time, so
    the source is pulled one item after another, in order.

    Stall reports: with ``settings.stall`` a ``next()`` that waits is timed from its first wait,
    in the same sliced waits as ``timeout`` (which raises first when it is sooner); each item
    keeps when it was pulled (``pulled_at``), so a report says how old each item in flight is.

    Ownership: the consumer's thread owns the reorder buffer (``ready``); the source is
    pulled by one feed at a time (``feeding``); ``lock`` guards everything both read or change
    (``closed``, ``exhausted``, ``next_seq``, ``outstanding``, ``items``, ``pulled_at``,
    ``progress``, the transport's bookkeeping). No lock is held across a call of the source or of ``fn``.
    """

    def __init__(
        self,
        settings: DispatchSettings,
        source: NodeIterator[Any],
        skip: Any,
        transport: Transport,
        stats: StatsCounter,
    ) -> None:
        self.settings = settings
        self.name = settings.name
        self.transport = transport
        self.stats = stats
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.feeding = True  # a feed runs or is asked for (the first one: here)
        self.feed_again = False
        self.feed_due = False  # an inline transport's feed, for the consumer's next next()
        self.closed = False
        self.exhausted = False
        self.next_seq = 0
        self.outstanding = 0
        self.items: dict[int, Any] = {}  # seq -> item, for notes and timeout errors
        self.pulled_at: dict[int, float] = {}  # seq -> when the source gave it (with a stall watch)
        self.results: Results = queue.SimpleQueue()
        # Owned by the consumer's thread:
        self.ready: dict[int, tuple[int, Any, float]] = {}  # in order: seq -> (kind, value, done_at)
        self.ready_fifo: deque[tuple[int, int, Any, float]] = deque()  # out of order
        self.next_out = 0
        self.peak = 0
        self.start_error: BaseException | None = None
        self.source = source
        self.progress = Progress(source.state_dict(), skip)
        register_for_exit(self)
        try:
            transport.open(self.results)
            self.feed(inline=True)
        except BaseException:
            self._stop(INTERRUPT_JOIN_TIMEOUT, warn=False, interrupted=True)
            raise

    # -- the feed: pull, snapshot, submit ------------------------------------------------------
    def feed(self, *, inline: bool = False) -> None:
        """Pull and submit while there is room; on whichever thread the transport woke (or,
        ``inline``, the consumer's). One feed runs at a time: room made meanwhile is seen by
        the feed running (``feed_again``)."""
        while True:
            try:
                self._fill()
            except BaseException as exc:  # the source's Ctrl-C or SystemExit: raised by next()
                with self.lock:
                    self.exhausted = True
                    self.feeding = False
                if inline:
                    raise
                self.results.put(_Fatal(exc))
                return
            with self.lock:
                if not self.feed_again:
                    self.feeding = False
                    return
                self.feed_again = False

    def _room_freed(self) -> None:
        """Under ``lock``: room was made (an item taken, a share ended); have it filled."""
        if self.closed or self.exhausted:
            return
        if self.feeding:
            self.feed_again = True
        else:
            self.feeding = True
            if self.transport.feeds_inline:
                self.feed_due = True  # the next next() feeds, first thing
            elif not self.transport.wake(self.feed):  # every share has ended: the epoch is over
                self.feeding = False
                self.exhausted = True
                self.results.put(_END)

    def _room(self) -> int | None:
        """Under ``lock``: the worker the next item goes to, if one may be pulled now."""
        s = self.settings
        if self.closed or self.exhausted:
            return None
        if self.outstanding >= s.capacity or self.next_seq - self.progress.frontier >= s.max_lead:
            return None
        worker = self.transport.room()
        if worker == ALL_ENDED:
            self.exhausted = True
            self.results.put(_END)
            return None
        return worker

    def _fill(self) -> None:
        try:
            self._pull()
        finally:  # the items pulled (also before an error) start, in one hand-over
            self.transport.flush()

    def _pull(self) -> None:
        source, results, stats = self.source, self.results, self.stats
        count_pulled = not self.transport.counts_items
        stamped = self.settings.stall is not None
        while True:
            with self.lock:
                worker = self._room()
            if worker is None:
                return
            start = time.perf_counter()
            try:
                item = next(source)
                failed = False
            except StopIteration:
                with self.lock:
                    self.exhausted = True
                results.put(_END)
                return
            except KeyboardInterrupt:  # Ctrl-C: stop the epoch, not an item
                raise
            except BaseException as exc:  # a source error (SystemExit too) is an item: raised at its place
                item, failed = exc, True
            snapshot = source.state_dict()
            stats.add(items_in=count_pulled, wait_source_s=time.perf_counter() - start)
            with self.lock:
                if self.closed:
                    return
                seq = self.next_seq
                self.next_seq = seq + 1
                if self.progress.pulled(seq, snapshot):
                    self.progress.finished(seq)
                    continue
                self.outstanding += 1
                if stamped:
                    self.pulled_at[seq] = start
                if failed:
                    self.items[seq] = _SOURCE_ERROR
                    results.put((seq, ERROR, item, -1, time.perf_counter()))
                else:
                    self.items[seq] = item
                    self.transport.submit(worker, seq, item)

    # -- the consumer -------------------------------------------------------------------------
    def next(self) -> U:
        with self.lock:
            start_error = self.start_error
            if self.closed and start_error is None:
                raise StopIteration
        if start_error is not None:  # every next() says so: the epoch cannot be whole
            self._failed_start(start_error)
        deadline = pull_deadline(self.settings.timeout)
        watch = self.settings.stall
        waits_from: float | None = None  # when this next() began to wait (with a stall watch)
        clock: StallClock | None = None  # its stall schedule, made once a wait lasts a slice
        while True:
            if self.feed_due:
                self.feed_due = False
                self.feed(inline=True)
            taken = self._take()
            if taken is not None:
                delivered, value = self._deliver(*taken)
                if delivered:
                    return value  # type: ignore[no-any-return]
                continue
            with self.lock:
                if self.outstanding == 0 and self.exhausted:
                    raise StopIteration
            if watch is not None and waits_from is None:  # this next() waits: from now on, a stall is timed
                waits_from = time.monotonic()
            clock = self._receive(deadline, clock, waits_from)

    def _take(self) -> tuple[int, int, Any, float] | None:
        if not self.settings.in_order:
            try:  # not "if fifo: popleft()": a close from another thread clears it in between
                return self.ready_fifo.popleft()
            except IndexError:
                return None
        ready = self.ready
        entry = ready.pop(self.next_out, None)
        if entry is None:
            with self.lock:  # pass over items that will never come (a share ended, a resume's skip)
                while self.next_out < self.next_seq and self.next_out not in self.items and self.next_out not in ready:
                    self.next_out += 1
            entry = ready.pop(self.next_out, None)
            if entry is None:
                return None
        seq = self.next_out
        self.next_out = seq + 1
        return seq, entry[0], entry[1], entry[2]

    def _deliver(self, seq: int, kind: int, value: Any, done_at: float) -> tuple[bool, Any]:
        """Item ``seq`` is handed to the consumer: (True, value), raised, or (False, None) skipped."""
        with self.lock:
            item = self.items.pop(seq, _MISSING)
            self.pulled_at.pop(seq, None)
            self.outstanding -= 1
            if kind != LOST:  # a lost item stays unfinished: a resume runs it again
                self.progress.finished(seq)
            self._room_freed()
            closed = self.closed
        if kind == LOST and closed:  # lost to a close from another thread, which stops the workers
            raise EpochClosedError(f"{self.name}: the epoch was closed by another thread while next() waited")
        if self.feed_due and self.transport.feeds_at_delivery:  # before the item is returned or raised
            self.feed_due = False
            self.feed(inline=True)
        skipped = (
            kind == ERROR and self.settings.skip_errors and item is not _SOURCE_ERROR and self.transport.skips(value)
        )
        self.stats.add(
            items_out=not skipped,
            skipped=skipped,
            wait_consumer_s=time.perf_counter() - done_at,
            peak_buffered=self.peak,
        )
        if kind == OK:
            return True, value
        if skipped:
            return False, None
        raise value

    def _receive(
        self, deadline: Deadline | None, clock: StallClock | None, waits_from: float | None
    ) -> StallClock | None:
        """Wait for a message, then take it and every one already there. ``timeout`` (the
        ``deadline``) raises; with a stall watch (``waits_from``: when this ``next()`` began to
        wait), a wait that outlasts a slice gets a schedule (``clock``, returned), and a report
        due meanwhile is made and the wait goes on."""
        results = self.results
        if self.transport.receives:  # its workers' channels, waited on here
            message, clock = self._wait_channels(deadline, clock, waits_from)
        else:
            message, clock = self._wait_queue(deadline, clock, waits_from)
        while True:
            if type(message) is tuple:
                self._store(message)
            else:
                self._signal(message)
            if results.empty():
                return clock
            message = results.get_nowait()

    def _wait_queue(
        self, deadline: Deadline | None, clock: StallClock | None, waits_from: float | None
    ) -> tuple[Any, StallClock | None]:
        """The first message the workers put on the results queue, waited for in slices."""
        results = self.results
        while True:
            try:
                message = results.get(timeout=wait_slice(deadline if clock is None else clock.deadline(deadline)))
                return message, clock
            except queue.Empty:
                if expired(deadline):
                    raise self._timeout_error() from None
                clock = self._check_stall(clock, waits_from)

    def _wait_channels(
        self, deadline: Deadline | None, clock: StallClock | None, waits_from: float | None
    ) -> tuple[Any, StallClock | None]:
        """The first message the transport takes in from its workers' channels (its waits have
        no slice of their own: a stall watch bounds them with its schedule from the start)."""
        results, watch = self.results, self.settings.stall
        if clock is None and watch is not None and waits_from is not None:
            clock = StallClock(watch.after, waits_from)
        while results.empty():
            if not self.transport.receive(deadline if clock is None else clock.deadline(deadline)):
                if expired(deadline):
                    raise self._timeout_error()
                clock = self._check_stall(clock, waits_from)
        return results.get_nowait(), clock

    def _store(self, message: tuple[int, int, Any, int, float]) -> None:
        seq, kind, value, worker, done_at = message
        if kind == ENDED:
            self._share_ended(worker)
            return
        if worker >= 0:
            with self.lock:
                if self.transport.received(worker):
                    self._room_freed()
        if self.settings.in_order:
            self.ready[seq] = (kind, value, done_at)
            buffered = len(self.ready)
        else:
            self.ready_fifo.append((seq, kind, value, done_at))
            buffered = len(self.ready_fifo)
        if buffered > self.peak:
            self.peak = buffered

    def _share_ended(self, worker: int) -> None:
        """torch: the worker's iterator is exhausted; its queued items are dropped."""
        with self.lock:
            dropped = self.transport.ended(worker)
            self.outstanding -= len(dropped)
            for seq in dropped:
                self.items.pop(seq, None)
                self.pulled_at.pop(seq, None)
                self.progress.finished(seq)
            self._room_freed()
        if self.feed_due and self.transport.feeds_at_delivery:  # before the item is returned or raised
            self.feed_due = False
            self.feed(inline=True)

    def _signal(self, message: object) -> None:
        if message is _END:
            return
        if message is _WAKE:
            raise EpochClosedError(f"{self.name}: the epoch was closed by another thread while next() waited")
        if isinstance(message, StartFailed):
            with self.lock:
                self.start_error = message.error
            self._failed_start(message.error)
        if isinstance(message, _Fatal):
            raise message.error

    def _failed_start(self, error: BaseException) -> None:
        self._stop(INTERRUPT_JOIN_TIMEOUT, warn=False, interrupted=True)
        raise RuntimeError(f"{self.name}: a worker thread could not be started") from error

    def waiting_for(self) -> int:
        """The item ``next()`` waits for: the next in order, else the oldest in flight."""
        with self.lock:
            if self.settings.in_order:
                return self.next_out
            return min(self.items, default=self.next_seq)

    def _check_stall(self, clock: StallClock | None, waits_from: float | None) -> StallClock | None:
        """A wait slice ended: if a stall report is due, hand the watch what this ``next()``
        waits for. The schedule (returned) is made at the first slice that ends (a wait that
        ends sooner costs one clock read)."""
        watch = self.settings.stall
        if watch is None or waits_from is None:
            return None
        if clock is None:
            clock = StallClock(watch.after, waits_from)
        waited = clock.take_due()
        if waited is None:
            return clock
        gather = getattr(self.transport, "gather", None)
        if gather is not None:  # workers in other processes: ask them (answers come on their channels)
            gather(GATHER_S)
        watch.callback(self._stall_view(waited, clock.reports))
        return clock

    def _stall_view(self, waited: float, number: int) -> StallView:
        """What the consumer waits for, read under the lock (the reorder buffer is this thread's)."""
        done = self.ready.keys() | {entry[0] for entry in self.ready_fifo}
        now = time.perf_counter()
        with self.lock:
            awaited = self.next_out if self.settings.in_order else min(self.items, default=self.next_seq)
            seqs = sorted(seq for seq in self.items if seq not in done)
            placement = getattr(self.transport, "where", None)
            where: dict[int, Where] = placement(seqs) if placement is not None else {}
            in_flight = tuple(
                (seq, self._item_of(seq), where.get(seq, _IN_FLIGHT), now - self.pulled_at.get(seq, now))
                for seq in seqs
            )
            awaited_item = self._item_of(awaited)
        return StallView(self.name, waited, number, awaited, awaited_item, in_flight)

    def _item_of(self, seq: int) -> Any:
        """Under ``lock``: item ``seq`` as the source gave it (None: the source raised, or none)."""
        item = self.items.get(seq)
        return None if item is _SOURCE_ERROR else item

    def _timeout_error(self) -> NodeTimeoutError:
        seq = self.waiting_for()
        with self.lock:
            item = self.items.get(seq)
        return NodeTimeoutError(self.name, seq, None if item is _SOURCE_ERROR else item, self.settings.timeout)

    def state_dict(self) -> StateDict:
        with self.lock:
            return self.progress.state()

    # -- closing ------------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Ctrl-C: stop now, within the short bound and without a warning."""
        self._stop(INTERRUPT_JOIN_TIMEOUT, warn=False, interrupted=True)

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """Stop the feed and the workers and close the source, waiting at most ``timeout`` in
        all; True when everything stopped in time. Queued items are dropped. Idempotent."""
        return self._stop(timeout, warn=warn, interrupted=False)

    def _stop(self, timeout: float | None, *, warn: bool, interrupted: bool) -> bool:
        if self.pid != os.getpid():
            # A forked child has none of these threads, and a lock may have been held at the
            # fork by one of them: take nothing, wait for nothing.
            self.closed = True
            return True
        with self.lock:
            again = self.closed
            self.closed = True
        deadline = Deadline(0.0 if again else timeout)
        source_stopped = True
        if not again:
            self.results.put(_WAKE)
            # The feed thread may be inside next(source) right now: a generator refuses
            # close() then (closed again below, once that thread has returned), a node wakes.
            source_stopped = close_source(self.source, busy=True, timeout=deadline.remaining(), warn=warn)
        stopped = self.transport.close(timeout, deadline, warn=warn, interrupted=interrupted)
        if not again and stopped:  # a worker was in next(source) at the first try: it is out now
            source_stopped = close_source(self.source, busy=True, timeout=deadline.remaining(), warn=warn)
        if not again:
            self.ready.clear()
            self.ready_fifo.clear()
            with self.lock:
                self.items.clear()
                self.pulled_at.clear()
        return stopped and source_stopped
