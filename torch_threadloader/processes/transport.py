"""The process transports: the loader's process's side of its worker processes in one epoch.

:class:`Pipes` are the channels (send to a child, wait for what the children sent or for one
lost, wake a waiting wait). :class:`ChildrenTransport` is what both
:class:`~datapipes.dispatch.Transport` s over the children share: in the consumer's thread
(``receives``) it takes in what the children sent, a lost child and the children's ends, and a
close from any thread cancels their work and wakes it. The
:class:`~datapipes.dispatch.Dispatcher` over it owns the contract (order, the bound on what is
asked ahead, ``timeout``, a close from another thread, the lost-worker error's place, state).
:class:`ProcessTransport` is a map-style or async dataset's: the dispatcher pulls the epoch's
sampler and the transport sends each index batch to a child. (An ``IterableDataset``'s:
``turns.TurnsTransport``.)
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

import datapipes as dp
from datapipes._lifecycle import expired, wait_slice
from datapipes.dispatch.transport import LOST, OK, Results
from torch_threadloader.processes.errors import WorkerProcessError
from torch_threadloader.processes.messages import (
    BatchDone,
    BatchFailed,
    BatchTag,
    Cancel,
    EpochEnded,
    LoadBatch,
    Needed,
    News,
    NoMoreBatches,
    SendStacks,
    Stacks,
    StartEpoch,
    Taken,
    ToChild,
    ToParent,
    WorkerLost,
)
from torch_threadloader.processes.pool import NAME, ChildHandle, WorkerProcesses
from torch_threadloader.userdata import Index

if TYPE_CHECKING:
    from torch_threadloader.processes.graph import ProcessGraph
    from torch_threadloader.skip import TooManyErrors

__all__ = [
    "CLOSED",
    "END_WAIT",
    "ChildrenTransport",
    "Delivery",
    "Pipes",
    "ProcessTransport",
    "Received",
    "Sent",
    "release",
]

#: ``Pipes.wait``'s answer when :meth:`Pipes.wake` woke it (a close).
CLOSED = "closed"
#: Seconds a complete epoch waits, in all, for the children's ends (and their stats).
END_WAIT = 1.0
#: A message of child ``c`` (or the news that it was lost), as ``(c, message)``.
Received = tuple[int, ToParent | WorkerLost]


class Pipes:
    """The pipes of ``children`` and a wake pipe. ``send`` and ``wake`` may come from any
    thread (a child's ``send`` is locked); ``wait`` and ``wait_ends`` from the epoch's
    consumer thread only, which also owns ``lost``."""

    def __init__(self, children: list[ChildHandle]) -> None:
        self.children = children
        self.lost = [False] * len(children)  # a WorkerLost was reported for the child
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)

    def send(self, c: int, message: ToChild) -> bool:
        """``message`` to child ``c``; False when it is gone (then :meth:`lose` reports it)."""
        return self.children[c].send(message)

    def lose(self, c: int) -> WorkerLost:
        """The news that child ``c`` is lost, how it ended in words (once per child)."""
        self.lost[c] = True
        return WorkerLost(c, self.children[c].death())

    def wake(self) -> None:
        """Make a waiting (or the next) :meth:`wait` answer :data:`CLOSED`."""
        try:
            self._wake_w.send_bytes(b"")
        except OSError:
            pass

    def wait(self, deadline: dp.Deadline | None) -> list[Received] | str:
        """What the children sent, in the order each sent it, a lost child after what it sent
        before it ended; ``[]`` at the deadline, :data:`CLOSED` when woken."""
        waits: list[Connection | int] = [self._wake_r]
        for c, child in enumerate(self.children):
            if not self.lost[c]:
                waits += [child.outbox, child.process.sentinel]
        try:
            while True:  # in slices, so that Ctrl-C is seen (see wait_slice)
                ready = multiprocessing.connection.wait(waits, wait_slice(deadline))
                if ready or expired(deadline):
                    break
        except (OSError, ValueError):  # a close from another thread closed a pipe meanwhile
            return CLOSED
        if self._wake_r in ready:
            return CLOSED
        out: list[Received] = []
        for c, child in enumerate(self.children):
            if self.lost[c]:
                continue
            pipe_open = self._drain(c, out) if child.outbox in ready else True
            if not pipe_open or child.process.sentinel in ready:
                # It ended: what it sent before is still in the pipe, and is handed out first.
                self._drain(c, out)
                out.append((c, self.lose(c)))
        return out

    def wait_ends(self, pending: list[int], deadline: dp.Deadline) -> tuple[list[Received], list[int]]:
        """One wait, until ``deadline``, for the children ``pending``: what they sent, and those
        whose pipe ended."""
        out: list[Received] = []
        closed: list[int] = []
        ready = multiprocessing.connection.wait([self.children[c].outbox for c in pending], deadline.remaining())
        for c in pending:
            if self.children[c].outbox in ready and not self._drain(c, out):
                closed.append(c)
        return out, closed

    def _drain(self, c: int, out: list[Received]) -> bool:
        """Every message child ``c`` has sent, onto ``out``; False when its pipe ended."""
        conn = self.children[c].outbox
        try:
            while conn.poll():
                out.append((c, conn.recv()))
        except (EOFError, OSError):
            return False
        return True


class Sent:
    """The batches sent this epoch: item ``seq``'s position and indices until it is handed
    out, and its number ``k`` in its child's share (the child tags its results with ``k``)
    until its result comes. Owned by the epoch's consumer thread."""

    def __init__(self, processes: int) -> None:
        self.items: dict[int, tuple[int, Index]] = {}  # seq -> (position, indices)
        self.where: dict[int, tuple[int, int]] = {}  # seq -> (child, k), until handed out
        self._local: list[dict[int, int]] = [{} for _ in range(processes)]  # per child: k -> seq
        self._next_local = [0] * processes

    def add(self, c: int, seq: int, position: int, indices: Index) -> None:
        """Item ``seq``, the batch at ``position``, is sent to child ``c``."""
        self.items[seq] = (position, indices)
        k = self._next_local[c]
        self._next_local[c] = k + 1
        self._local[c][k] = seq
        self.where[seq] = (c, k)

    def handed_out(self, seq: int) -> None:
        self.items.pop(seq, None)
        self.where.pop(seq, None)

    def received(self, c: int, tag: BatchTag) -> tuple[int, int]:
        """``(seq, k)`` of child ``c``'s result tagged ``tag`` (untagged: its oldest)."""
        local = self._local[c]
        k = tag if isinstance(tag, int) and tag in local else min(local)
        return local.pop(k), k

    def of_local(self, c: int, k: object) -> int | None:
        """``seq`` of child ``c``'s batch ``k`` while it is out, else None."""
        return self._local[c].get(k) if isinstance(k, int) else None

    def take_held(self, c: int) -> list[int]:
        """The items child ``c`` holds (sent, no result yet), oldest first; forgotten."""
        held = sorted(self._local[c].values())
        self._local[c].clear()
        return held


class Delivery:
    """An OK message's value: child ``child``'s ``message`` (a batch or its error) for item
    ``seq``, the batch at ``position`` of the epoch, number ``local`` in the child's share."""

    __slots__ = ("child", "local", "message", "position", "seq")

    def __init__(self, message: BatchDone | BatchFailed, seq: int, position: int, child: int, local: int) -> None:
        self.message = message
        self.seq = seq
        self.position = position
        self.child = child
        self.local = local


class ChildrenTransport:
    """What both transports over the worker processes share. Inline (``feeds_inline``: the
    dispatcher feeds in the consumer's thread) and receiving (``receives``): :meth:`receive`
    waits on the children's pipes and sentinels in the consumer's thread and takes in what they
    sent: a batch (:meth:`_batch`), their news, a child's end, a lost child (:meth:`_lost`).
    A subclass says what a batch is to the dispatcher.

    Threads: the dispatcher's calls (under its lock) and :meth:`receive` run in the consumer's
    thread, which owns the books; :meth:`close` may come from another thread: it only sends,
    under each child's lock, and wakes a waiting :meth:`receive`."""

    def __init__(
        self,
        node: ProcessGraph,
        pool: WorkerProcesses,
        own_pool: WorkerProcesses | None,
        children: list[ChildHandle],
        epoch: int,
    ) -> None:
        self.name = NAME
        self.feeds_inline = True  # the source is pulled in next()
        self.feeds_at_delivery = True  # before the batch is returned: torch's order of draws
        self.receives = True
        self.counts_items = True  # nothing counts as an item in: the children load them
        self.node = node
        self.pool = pool
        self.own_pool = own_pool
        self.children = children
        self.pipes = Pipes(children)
        self.epoch = epoch
        p = self.p = len(children)
        self.results: Results | None = None
        self.lock = threading.Lock()
        self.closed = False  # guarded by lock
        # The consumer's thread's:
        self.children_ended = [False] * p  # the child's graph ended (its EpochEnded came)
        self.dead: list[str | None] = [None] * p  # how the child was lost
        self.threads: list[tuple[tuple[str, str | None, tuple[str, ...]], ...] | None] = [None] * p  # its Stacks

    # -- the dispatcher's calls ----------------------------------------------------------------
    def flush(self) -> None:
        """Nothing held: ``submit`` sends each batch as it is pulled."""

    def wake(self, feed: Callable[[], None]) -> bool:
        raise AssertionError("an inline transport is never woken")

    def skips(self, error: BaseException) -> bool:
        return False  # a child skips its own samples; a batch's error is raised

    # -- receiving, in the consumer's thread ---------------------------------------------------
    def receive(self, deadline: dp.Deadline | None) -> bool:
        if self._answer():
            return True
        received = self.pipes.wait(deadline)
        if isinstance(received, str):  # CLOSED: the dispatcher's wake is on the results queue
            assert self.results is not None
            with self.lock:
                closed = self.closed
            if self.results.empty() and not closed:  # the pipes were closed under it
                for c in range(self.p):
                    if not self.pipes.lost[c]:
                        self._take_in(c, self.pipes.lose(c))
            return True
        for c, message in received:
            self._take_in(c, message)
        return bool(received)

    def _answer(self) -> bool:
        """Put on the results queue what the dispatcher waits for, if the batches taken in
        already answer it (a subclass that does not put each batch as it comes); True if so."""
        return False

    def _take_in(self, c: int, message: ToParent | WorkerLost) -> None:
        """Child ``c``'s message (or the news that it was lost), dispatched on its type."""
        if isinstance(message, WorkerLost):
            self.dead[c] = message.why
            self.pool.mark_dead(self.children[c])
            self._lost(c)
            return
        current = message.epoch == self.epoch
        if message.news is not None:
            self._news(c, message.news, current)
        if not current:
            return  # an earlier epoch's
        if isinstance(message, Stacks):
            self.threads[c] = message.threads
            return
        if isinstance(message, EpochEnded):
            self.children_ended[c] = True
            self.node.child_stats(c, message.stats)
            return
        self._batch(c, message)

    def gather(self, timeout: float) -> None:
        """``stall_report_after``: ask every live child for its threads' stacks and take in what
        the children send until each has answered, at most ``timeout`` seconds (see
        ``datapipes.dispatch.stall.Placement``)."""
        asked = [c for c in range(self.p) if self.dead[c] is None and self.pipes.send(c, SendStacks(self.epoch))]
        for c in asked:
            self.threads[c] = None
        deadline = dp.Deadline(timeout)
        while any(self.threads[c] is None and self.dead[c] is None for c in asked) and deadline.remaining():
            received = self.pipes.wait(deadline)
            if isinstance(received, str):  # closed meanwhile
                return
            for c, message in received:
                self._take_in(c, message)

    def _batch(self, c: int, message: BatchDone | BatchFailed) -> None:
        """A batch (or its error) of this epoch from child ``c``."""
        raise NotImplementedError

    def _news(self, c: int, news: News, current: bool) -> None:
        """Child ``c``'s news (see ``ProcessGraph.merge_news``); its skip records of this epoch
        are added to the epoch's policy, naming no batch."""
        policy = self.node.merge_news(c, news, current)
        if policy is not None and news.errors:
            for record in news.errors:
                record["batch"] = None
                policy.add([record])

    def _lost(self, c: int) -> None:
        """Child ``c`` was lost (``dead[c]`` says how)."""

    def lost_error(self, c: int, where: str = "") -> WorkerProcessError:
        """The error that lost child ``c`` raises, ``where`` naming the batch it held."""
        child = self.children[c]
        return WorkerProcessError(
            f"{self.dead[c]}{where}; the epoch cannot go on without its batches",
            process=c,
            pid=child.pid,
            exitcode=child.process.exitcode,
            worker=child.describe(),
        )

    def wait_ends(self) -> None:
        """The epoch is complete: take each child's end (it carries its graph's stats), within
        :data:`END_WAIT` seconds in all (they come right after the last batch)."""
        deadline = dp.Deadline(END_WAIT)
        while True:
            pending = [c for c in range(self.p) if not self.children_ended[c] and self.dead[c] is None]
            if not pending or not deadline.remaining():
                return
            received, closed = self.pipes.wait_ends(pending, deadline)
            for c, message in received:
                self._take_in(c, message)
            for c in closed:
                self.children_ended[c] = True

    # -- closing --------------------------------------------------------------------------------
    def close(self, timeout: float | None, deadline: dp.Deadline, *, warn: bool, interrupted: bool) -> bool:
        """The children stop the epoch's work (their processes stay for the next epoch, unless
        this epoch started its own: stopped within ``deadline``); a waiting receive wakes."""
        with self.lock:
            again, self.closed = self.closed, True
        if again:
            return True
        for c in range(self.p):
            self.pipes.send(c, Cancel(self.epoch))
        self.pipes.wake()
        release(self.pool, self.own_pool, deadline.remaining(), warn=warn)
        return True


class ProcessTransport(ChildrenTransport):
    """Item ``seq`` (``(position, indices)`` from the epoch's sampler) goes to a child as a
    :class:`LoadBatch`: with ``in_order`` to child ``position % P`` (slot ``position // P``),
    else to the child with the fewest in hand while it has fewer than ``per_child``. The
    child's :class:`BatchDone` or :class:`BatchFailed` becomes an ``OK`` message whose value is
    a :class:`Delivery` (the epoch raises a failed batch's error, or the ``TooManyErrors`` its
    records crossed, as it hands it out); a lost child, one ``LOST`` message per item it held,
    a :class:`WorkerProcessError` naming it and the batch."""

    def __init__(
        self,
        node: ProcessGraph,
        pool: WorkerProcesses,
        own_pool: WorkerProcesses | None,
        children: list[ChildHandle],
        epoch: int,
        *,
        in_order: bool,
        per_child: int,
    ) -> None:
        super().__init__(node, pool, own_pool, children, epoch)
        self.in_order = in_order
        self.per_child = per_child
        self.end_sent = False
        # The consumer's thread's:
        self.sent = Sent(self.p)  # seq -> (position, indices); per child k -> seq
        self.in_hand = [0] * self.p  # per child: sent, not yet received
        self.too_many: dict[int | None, TooManyErrors] = {}  # seq (None: unknown) -> the error it raises
        self.needed: int | None = None  # max_bytes_in_flight: the seq whose child was told it is needed next

    # -- the dispatcher's calls ----------------------------------------------------------------
    def open(self, results: Results) -> None:
        self.results = results
        for c in range(self.p):  # a child gone already is found by receive(): its sentinel
            self.pipes.send(c, StartEpoch(self.epoch, self.node.base_seed))

    def room(self) -> int | None:
        if self.in_order:
            return 0  # submit routes by the batch's position
        c = min(range(self.p), key=self.in_hand.__getitem__)
        return c if self.in_hand[c] < self.per_child else None

    def submit(self, worker: int, seq: int, item: tuple[int, Index]) -> None:
        position, indices = item
        if self.in_order:
            # Batch p is worker p % W's, in a resumed epoch too (its positions start past 0
            # and may skip some): process p % P, which gives it to its thread (p // P) % n.
            c = position % self.p
            message = LoadBatch(self.epoch, indices, position // self.p)
        else:
            c, message = worker, LoadBatch(self.epoch, indices)
        self.sent.add(c, seq, position, indices)
        self.in_hand[c] += 1
        if self.dead[c] is not None:
            self._lost(c)
        else:
            self.pipes.send(c, message)  # refused: the child is gone, its sentinel says so
        self._tell_needed()

    def _tell_needed(self) -> None:
        """``max_bytes_in_flight``: the oldest batch sent and not handed out, of every child,
        is the one batch admitted past the budget (each child holds at most its share of the
        rest); its child is told when that batch changes."""
        items = self.sent.items
        if self.node.budget is None or not items:
            return
        seq = min(items)
        if seq == self.needed:
            return
        self.needed = seq
        c, k = self.sent.where[seq]
        if self.dead[c] is None:
            self.pipes.send(c, Needed(self.epoch, k))

    def where(self, seqs: list[int]) -> dict[int, dp.Where]:
        """Each batch's worker process (see ``datapipes.dispatch.stall.Placement``)."""
        out: dict[int, dp.Where] = {}
        for seq in seqs:
            sent = self.sent.where.get(seq)
            if sent is not None:
                process = self.children[sent[0]].process
                threads = self.threads[sent[0]] or ()
                out[seq] = dp.Where(
                    "in a worker process", sent[0], f"{process.name} (pid {process.pid})", threads=threads
                )
        return out

    def received(self, worker: int) -> bool:
        self.in_hand[worker] -= 1
        return not self.in_order and self.in_hand[worker] == self.per_child - 1

    def ended(self, worker: int) -> list[int]:
        return []

    def no_more(self) -> None:
        """The sampler is exhausted: each child's graph ends after the batches it has."""
        if not self.end_sent:
            self.end_sent = True
            for c in range(self.p):
                self.pipes.send(c, NoMoreBatches(self.epoch))

    # -- receiving, in the consumer's thread ---------------------------------------------------
    def _batch(self, c: int, message: BatchDone | BatchFailed) -> None:
        seq, k = self.sent.received(c, message.tag)
        position = self.sent.items[seq][0]
        assert self.results is not None
        self.results.put((seq, OK, Delivery(message, seq, position, c, k), c, time.perf_counter()))

    def _news(self, c: int, news: News, current: bool) -> None:
        """Child ``c``'s news (see ``ProcessGraph.merge_news``); its skip records of this epoch
        name their batch by its place in the epoch, and one past ``max_errors`` fails its batch."""
        policy = self.node.merge_news(c, news, current)
        if policy is None or not news.errors:
            return
        items = self.sent.items
        for record in news.errors:
            seq = self.sent.of_local(c, record.get("batch"))
            record["batch"] = items[seq][0] if seq is not None and seq in items else None
            too_many = policy.add([record])
            if too_many is not None:
                self.too_many.setdefault(seq, too_many)

    def _lost(self, c: int) -> None:
        """Each item child ``c`` holds is lost: a ``LOST`` message each, oldest first."""
        assert self.results is not None
        for seq in self.sent.take_held(c):
            where = ""
            if seq in self.sent.items:
                position, indices = self.sent.items[seq]
                where = f" while it held batch {position} (indices {indices!r})"
            self.results.put((seq, LOST, self.lost_error(c, where), -1, time.perf_counter()))

    def handed_out(self, delivery: Delivery) -> TooManyErrors | None:
        """The consumer takes ``delivery``'s batch: its bytes given back to its child (they are
        the caller's now); the ``TooManyErrors`` it raises if its records crossed ``max_errors``."""
        c = delivery.child
        if self.node.budget is not None and self.dead[c] is None:
            self.pipes.send(c, Taken(self.epoch, delivery.local))
        self.sent.handed_out(delivery.seq)
        self._tell_needed()
        return self.too_many.pop(delivery.seq, None) or self.too_many.pop(None, None)


def release(pool: WorkerProcesses, own_pool: WorkerProcesses | None, timeout: float | None, *, warn: bool) -> None:
    """An epoch is done with its processes: its own are stopped within ``timeout``, the
    loader's are let go for the next epoch."""
    if own_pool is not None:
        own_pool.close(timeout, warn=warn)
    else:
        pool.release()
