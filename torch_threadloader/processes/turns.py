"""An ``IterableDataset``'s epoch over worker processes (:class:`TurnsEpoch`): the one
:class:`~datapipes.dispatch.Dispatcher` over a :class:`TurnsTransport`, as a map-style epoch is
the dispatcher over the process transport.

Here no item is sent: a child's workers read their own shares, a credit lets a child send its
next batch whichever worker made it, and the order is round robin over all ``P * n`` workers
(:class:`Turns`), where a worker's end is only seen when its child's next batch is another
worker's. So the dispatcher's items are asks: it pulls one ``None`` per batch, numbers it, and
the transport answers the oldest ask with the next batch in turn, the error of a lost child
that holds it, or the end of every share. The dispatcher owns what it owns in every mode:
``timeout``, a close from any thread, Ctrl-C, the lost worker's error at its place.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from typing import TYPE_CHECKING

import datapipes as dp
from datapipes.dispatch import Dispatcher, DispatchSettings
from datapipes.dispatch.transport import ALL_ENDED, ENDED, LOST, OK, Results
from torch_threadloader.processes.epoch import ChildrenEpoch, open_processes
from torch_threadloader.processes.messages import (
    BatchDone,
    BatchFailed,
    BatchTag,
    Credit,
    StartEpoch,
    TaggedBatch,
    ToParent,
    WorkerLost,
)
from torch_threadloader.processes.pool import NAME, ChildHandle, WorkerProcesses
from torch_threadloader.processes.transport import ChildrenTransport, release
from torch_threadloader.tags import WorkerTag

if TYPE_CHECKING:
    from torch_threadloader.processes.graph import ProcessGraph

__all__ = ["Result", "Turns", "TurnsEpoch", "TurnsTransport", "child_resumes"]


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """A batch (or its error) received from child ``child``, waiting to be handed out; its
    ``message.tag`` is ``(worker, state, ended[, items])``, the worker numbered in its child."""

    message: BatchDone | BatchFailed
    child: int


def child_resumes(
    resume: dp.StateDict | None, processes: int, threads: int, total: int
) -> tuple[int, list[dp.StateDict | None]]:
    """``(turn, parts)``: whose turn is first (a worker of all ``total``), and each child's part
    of ``resume`` (its workers' states, and which of its threads goes first), or ``None`` each
    for an epoch from the start. Worker ``w`` is thread ``w // P`` of child ``w % P``."""
    turn = int(resume["turn"]) if resume is not None else 0
    parts: list[dp.StateDict | None] = []
    for c in range(processes):
        first = turn + ((c - turn) % processes)  # child c's first worker from the turn on
        if first >= total:
            first -= total
        if resume is None:
            parts.append(None)
            continue
        workers = resume["workers"]
        parts.append({"workers": [workers[t * processes + c] for t in range(threads)], "turn": first // processes})
    return turn, parts


def worker_of(tag: BatchTag) -> int | None:
    """The worker (numbered in its child) that made a batch tagged ``tag``; None if unknown."""
    return tag[0] if isinstance(tag, tuple) else None


def global_tag(tag: BatchTag, processes: int, child: int) -> WorkerTag | None:
    """Child ``child``'s tag with its worker's number among all workers: thread ``t`` of child
    ``c`` is worker ``t * P + c``."""
    if not isinstance(tag, tuple):
        return None
    worker = tag[0] * processes + child
    if len(tag) == 4:
        return worker, tag[1], tag[2], tag[3]
    return worker, tag[1], tag[2]


class Turns:
    """``IterableDataset``, in order: the next batch of the next worker still active, round
    robin over all ``P * n`` workers, as in one process. A process's batches come in its own
    round-robin order, so when its next batch is not from the worker whose turn it is, that
    worker's share has ended (in one process the same turn is passed over). Owned by the
    epoch's consumer thread."""

    def __init__(self, processes: int, total: int, turn: int) -> None:
        self._p = processes
        self.turn = turn
        self.active = [True] * total

    def take(self, fifo: list[deque[Result]], ended: list[bool]) -> tuple[Result | None, int | None]:
        """``(result, None)``, or ``(None, c)`` when the turn waits on child ``c``'s next batch,
        or ``(None, None)`` when no worker is active."""
        p, active = self._p, self.active
        total = len(active)
        for _ in range(total):
            w = self.turn
            c, t = w % p, w // p
            queue = fifo[c]
            if active[w] and queue:
                worker = worker_of(queue[0].message.tag)
                if worker is None or worker == t:
                    self.turn = (w + 1) % total
                    return queue.popleft(), None
                active[w] = False
            elif active[w] and ended[c]:
                active[w] = False
            elif active[w]:
                return None, c
            self.turn = (w + 1) % total
        return None, None


class TurnsTransport(ChildrenTransport):
    """The dispatcher's transport for an ``IterableDataset``'s epoch over the worker
    processes. At :meth:`open` each child is told the epoch (and its part of a resume) and
    given ``capacity`` credits; it sends a batch per credit, and gets one more as each of its
    batches is handed out, so it holds at most ``capacity`` batches. Each item the dispatcher
    submits is an ask (``seq``); :meth:`receive` answers the oldest with an ``OK`` message
    whose value is the next :class:`Result` in turn (``in_order=False``: the first to come),
    a ``LOST`` one whose value is the :class:`WorkerProcessError` of a lost child the turn
    waits on, or an ``ENDED`` one when every worker's share has ended (the epoch is over)."""

    def __init__(
        self,
        node: ProcessGraph,
        pool: WorkerProcesses,
        own_pool: WorkerProcesses | None,
        children: list[ChildHandle],
        epoch: int,
        *,
        in_order: bool,
        capacity: int,
    ) -> None:
        super().__init__(node, pool, own_pool, children, epoch)
        inputs = node.pool.inputs
        self.in_order = in_order
        self.capacity = capacity
        turn, self.resumes = child_resumes(node.resume, self.p, inputs.num_workers, inputs.total_workers)
        # The consumer's thread's:
        self.turns = Turns(self.p, inputs.total_workers, turn)
        self.fifo: list[deque[Result]] = [deque() for _ in range(self.p)]  # in order: per child
        self.any: deque[Result] = deque()  # in_order=False
        self.asked: deque[int] = deque()  # the dispatcher's asks not answered yet, oldest first
        self.all_ended = False
        self.warned: Warning | None = None  # max_batch_cost's warning made an error, to raise

    # -- the dispatcher's calls ----------------------------------------------------------------
    def where(self, seqs: list[int]) -> dict[int, dp.Where]:
        """Each ask waits on the children's next batches in turn: every child's threads, as
        they sent them (see ``datapipes.dispatch.stall.Placement``)."""
        threads = tuple(
            (f"{self.children[c].process.name}: {name}", stage, lines)
            for c in range(self.p)
            for name, stage, lines in self.threads[c] or ()
        )
        return {seq: dp.Where("in the worker processes", threads=threads) for seq in seqs}

    def open(self, results: Results) -> None:
        self.results = results
        for c in range(self.p):
            if not self.pipes.send(c, StartEpoch(self.epoch, self.node.base_seed, self.resumes[c])):
                self._take_in(c, self.pipes.lose(c))
                continue
            for _ in range(self.capacity):
                self.pipes.send(c, Credit(self.epoch))

    def room(self) -> int | None:
        return ALL_ENDED if self.all_ended else 0

    def submit(self, worker: int, seq: int, item: None) -> None:
        self.asked.append(seq)

    def received(self, worker: int) -> bool:
        return False  # answers name no worker

    def ended(self, worker: int) -> list[int]:
        """Every share has ended: the asks left are dropped, and nothing more is asked."""
        self.all_ended = True
        dropped = list(self.asked)
        self.asked.clear()
        return dropped

    # -- receiving, in the consumer's thread ---------------------------------------------------
    def receive(self, deadline: dp.Deadline | None) -> bool:
        answered = super().receive(deadline)
        warned, self.warned = self.warned, None
        if warned is not None:  # raised once every message received is taken in: none is lost
            raise warned
        return answered

    def _take_in(self, c: int, message: ToParent | WorkerLost) -> None:
        super()._take_in(c, message)
        take = self.node.over_budget
        if isinstance(message, WorkerLost) or message.news is None or take is None or message.epoch != self.epoch:
            return
        records = message.news.over_budget
        if not records:
            return
        try:
            take(records)
        except Warning as exc:  # BatchCostWarning made an error: raised by this next(), after every
            # record and batch is in (kept for the next). It comes when the record does, which may be
            # a few batches before the batch of one it names (threads raise it in that worker's turn).
            self.warned = exc

    def _batch(self, c: int, message: BatchDone | BatchFailed) -> None:
        (self.fifo[c] if self.in_order else self.any).append(Result(message, c))

    def _answer(self) -> bool:
        if not self.asked:
            return False
        assert self.results is not None
        lost: int | None = None
        if self.in_order:
            result, waits_on = self.turns.take(self.fifo, self.children_ended)
            if waits_on is not None and self.dead[waits_on] is not None:
                lost = waits_on
        else:
            result = self.any.popleft() if self.any else None
            if result is None:
                lost = next(
                    (c for c, why in enumerate(self.dead) if why is not None and not self.children_ended[c]), None
                )
        if result is not None:
            c = result.child
            if not self.children_ended[c] and self.dead[c] is None:
                self.pipes.send(c, Credit(self.epoch))  # it may send one more batch
            self.results.put((self.asked.popleft(), OK, result, -1, time.perf_counter()))
        elif lost is not None:
            self.results.put((self.asked.popleft(), LOST, self.lost_error(lost), -1, time.perf_counter()))
        elif self._finished():
            self.results.put((self.asked[0], ENDED, None, 0, time.perf_counter()))
        else:
            return False
        return True

    def _finished(self) -> bool:
        """Every child's share ended and every batch it sent was handed out."""
        return all(self.children_ended[c] and not self.fifo[c] for c in range(self.p)) and not self.any


class _Asks(dp.NodeIterator[None]):
    """The dispatcher's source: one ``None`` per batch asked of the children, without end
    (the transport ends the epoch)."""

    def __next__(self) -> None:
        return None

    def state_dict(self) -> dp.StateDict:
        return {}


class TurnsEpoch(ChildrenEpoch[Result, TurnsTransport]):
    """One epoch of an ``IterableDataset`` over the worker processes: yields ``(tag, batch)``,
    the tag ``(worker, state, ended[, items])`` with the worker's number among all workers.

    Bound: a child holds at most its graph's ``capacity`` batches (its credits), so at most
    ``P * capacity`` batches are sent and not yet handed out. The dispatcher asks for one
    batch at a time (its capacity is 1): it adds no depth of its own."""

    def __init__(self, node: ProcessGraph, state: dp.StateDict | None) -> None:
        inputs = node.pool.inputs
        pool, own, children, epoch = open_processes(node)
        try:
            transport = TurnsTransport(
                node, pool, own, children, epoch, in_order=inputs.plan.in_order, capacity=inputs.capacity
            )
        except BaseException:
            release(pool, own, 0, warn=False)
            raise
        settings = DispatchSettings(
            NAME,
            capacity=1,  # one ask at a time: the credits bound the children
            max_lead=1,
            in_order=True,  # the asks are answered in the order asked (the transport's order)
            timeout=node.timeout,
            stall=node.stall,
            skip_errors=False,  # the children skip samples; a batch's error is raised
        )
        run = Dispatcher[Result](settings, _Asks(), (), transport, node._stats)
        super().__init__(node, run, transport)

    def _hand_out(self, result: Result) -> TaggedBatch:
        message, c = result.message, result.child
        del result
        tag = global_tag(message.tag, self._transport.p, c)
        if isinstance(message, BatchFailed):
            error = message.error
            where = f" for worker {tag[0]}'s batch" if tag is not None else ""
            del message
            self._raise_failed(error, f"{self._transport.children[c].describe()}{where}", tag)
        batch = message.batch
        del message
        return self._finished(tag, batch)

    def state_dict(self) -> dp.StateDict:
        return {}
