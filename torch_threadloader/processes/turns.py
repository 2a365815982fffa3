"""An ``IterableDataset``'s epoch over worker processes (:class:`TurnsEpoch`): how a resumed
epoch's state is split between the children, credits in place of index batches, and whose
batch comes next in order.

Not the dispatcher's item model, so a thin adapter of its own: the dispatcher pulls items from
a source and numbers each as it gives it to a worker, and the order it hands out is that
numbering. Here no item is sent: a child's workers read their own shares, a credit lets a
child send its next batch whichever worker made it, and the order is round robin over all
``P * n`` workers, where a worker's end is only seen when its child's next batch is another
worker's. What it shares with the dispatcher's epochs: the pipes (``transport.Pipes``), the
processes (``epoch.open_processes``), the children's news and the lost-worker error.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import datapipes as dp
from torch_threadloader.processes.epoch import open_processes
from torch_threadloader.processes.errors import WorkerProcessError, raised_in
from torch_threadloader.processes.messages import (
    BatchDone,
    BatchFailed,
    Cancel,
    Credit,
    EpochEnded,
    StartEpoch,
    ToParent,
    WorkerLost,
)
from torch_threadloader.processes.pool import NAME
from torch_threadloader.processes.transport import END_WAIT, Pipes, release
from torch_threadloader.tags import tag_error

if TYPE_CHECKING:
    from torch_threadloader.processes.graph import ProcessGraph

__all__ = ["Result", "Turns", "TurnsEpoch", "child_resumes"]


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """A batch (or its error) received from child ``child``, waiting to be handed out: ``key``
    is its tag ``(worker, state, ended[, items])``, the worker numbered in its child."""

    message: BatchDone | BatchFailed
    key: Any
    child: int


def child_resumes(
    resume: dict[str, Any] | None, processes: int, threads: int, total: int
) -> tuple[int, list[dict[str, Any] | None]]:
    """``(turn, parts)``: whose turn is first (a worker of all ``total``), and each child's part
    of ``resume`` (its workers' states, and which of its threads goes first), or ``None`` each
    for an epoch from the start. Worker ``w`` is thread ``w // P`` of child ``w % P``."""
    turn = int(resume["turn"]) if resume is not None else 0
    parts: list[dict[str, Any] | None] = []
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
                tag = queue[0].key
                if tag is None or int(tag[0]) == t:
                    self.turn = (w + 1) % total
                    return queue.popleft(), None
                active[w] = False
            elif active[w] and ended[c]:
                active[w] = False
            elif active[w]:
                return None, c
            self.turn = (w + 1) % total
        return None, None


class TurnsEpoch(dp.NodeIterator[Any]):
    """One epoch of an ``IterableDataset`` over the worker processes. The consumer's thread
    owns the credits, the turns and the receiving ends; ``shutdown`` may come from another
    thread (it only sends, under each child's lock, and wakes a waiting ``next()``).

    Bound: a child holds at most its graph's ``capacity`` batches (its credits)."""

    def __init__(self, node: ProcessGraph, state: dp.StateDict | None) -> None:
        self._node = node
        self._lock = threading.Lock()
        self._closed = False  # guarded by _lock
        self._pid = os.getpid()
        inputs = node.pool.inputs
        self._in_order = inputs.plan.in_order
        self._pool, self._own, self._children, self._epoch = open_processes(node)
        self._pipes = Pipes(self._children)
        p = self._p = len(self._children)
        self._fifo: list[deque[Result]] = [deque() for _ in range(p)]  # in order: per child
        self._any: deque[Result] = deque()  # in_order=False
        self._ended = [False] * p  # the child's graph ended (its EpochEnded came)
        self._dead: list[str | None] = [None] * p  # how the child was lost
        self._yielded = 0
        turn, resumes = child_resumes(node.resume, p, inputs.num_workers, inputs.total_workers)
        self._turns = Turns(p, inputs.total_workers, turn)
        try:
            for c in range(p):
                if not self._pipes.send(c, StartEpoch(self._epoch, node.base_seed, resumes[c])):
                    self._receive(c, self._pipes.lose(c))
                for _ in range(inputs.capacity):
                    self._pipes.send(c, Credit(self._epoch))
        except BaseException:
            self.shutdown(0, warn=False)
            raise

    # -- receiving --------------------------------------------------------------------------------
    def _receive(self, c: int, message: ToParent | WorkerLost) -> None:
        if isinstance(message, WorkerLost):
            self._dead[c] = message.why
            self._pool.mark_dead(self._children[c])
            return
        current = message.epoch == self._epoch
        if message.news is not None:
            policy = self._node.merge_news(c, message.news, current)
            if policy is not None:
                for record in message.news.errors or []:
                    record["batch"] = None  # no batch of the epoch's by number: batches are the workers'
                    policy.add([record])
        if not current:
            return  # an earlier epoch's
        if isinstance(message, EpochEnded):
            self._ended[c] = True
            self._node.child_stats(c, message.stats)
            return
        (self._fifo[c] if self._in_order else self._any).append(Result(message, message.tag, c))

    def _wait(self, deadline: dp.Deadline | None) -> None:
        self._raise_if_closed()
        received = self._pipes.wait(deadline)
        if isinstance(received, str):  # CLOSED: woken by a close
            raise dp.EpochClosedError(f"{NAME}: the epoch was closed by another thread while next() waited")
        if not received:
            raise dp.NodeTimeoutError(NAME, self._yielded, None, self._node.timeout)
        for c, message in received:
            self._receive(c, message)

    def _wait_ends(self) -> None:
        deadline = dp.Deadline(END_WAIT)
        while True:
            pending = [c for c in range(self._p) if not self._ended[c] and self._dead[c] is None]
            if not pending or not deadline.remaining():
                return
            received, closed = self._pipes.wait_ends(pending, deadline)
            for c, message in received:
                self._receive(c, message)
            for c in closed:
                self._ended[c] = True

    def _raise_if_closed(self) -> None:
        with self._lock:
            closed = self._closed
        if closed:  # by another thread, which may be stopping the processes too
            raise dp.EpochClosedError(f"{NAME}: the epoch was closed by another thread while next() waited")

    # -- handing out ------------------------------------------------------------------------------
    def _take(self) -> Result | None:
        """The next result to hand out, or None; raises for a lost child that holds it."""
        if not self._in_order:
            if self._any:
                return self._any.popleft()
            for c, dead in enumerate(self._dead):
                if dead is not None and not self._ended[c]:
                    self._fail(c)
            return None
        result, waits_on = self._turns.take(self._fifo, self._ended)
        if waits_on is not None and self._dead[waits_on] is not None:
            self._fail(waits_on)
        return result

    def _fail(self, c: int) -> None:
        self._raise_if_closed()  # the loader's close() also stops the processes
        child = self._children[c]
        self.shutdown(0, warn=False)
        raise WorkerProcessError(
            f"{self._dead[c]}; the epoch cannot go on without its batches",
            process=c,
            pid=child.pid,
            exitcode=child.process.exitcode,
            worker=child.describe(),
        )

    def _finished(self) -> bool:
        return all(self._ended[c] and not self._fifo[c] for c in range(self._p)) and not self._any

    def __next__(self) -> Any:
        with self._lock:
            if self._closed:
                raise StopIteration
        timeout = self._node.timeout
        deadline = None if timeout is None else dp.Deadline(timeout)
        while True:
            result = self._take()
            if result is not None:
                return self._hand_out(result)
            if self._finished():
                self._wait_ends()
                self.close()
                raise StopIteration
            self._wait(deadline)

    def _hand_out(self, result: Result) -> Any:
        message, tag, c = result.message, self._tag(result.child, result.key), result.child
        del result
        self._yielded += 1
        self._node._stats.add(items_out=1)
        if isinstance(message, BatchFailed):
            where = f" for worker {tag[0]}'s batch" if tag else ""
            exc = raised_in(message.error, f"{self._children[c].describe()}{where}")
            if tag is not None:
                tag_error(exc, tag)
            del message
            raise exc
        batch = message.batch
        del message
        finish = self._node.finish
        if finish is not None:
            try:
                batch = finish(batch)
            except BaseException as exc:
                tag_error(exc, tag)
                raise
        return tag, batch

    def _tag(self, c: int, tag: Any) -> Any:
        """One more credit to child ``c`` (it may send one more batch); its tag with the
        worker's number here (``(worker, state, ended[, items])``)."""
        if not self._ended[c] and self._dead[c] is None:
            self._pipes.send(c, Credit(self._epoch))
        if tag is None:
            return None
        worker, *rest = tag
        return (int(worker) * self._p + c, *rest)

    # -- state and close --------------------------------------------------------------------------
    def state_dict(self) -> dp.StateDict:
        return {}

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """End the epoch: the children stop its work (their processes stay for the next
        epoch, unless this epoch started its own: stopped within ``timeout``). In a forked
        child of the process that opened it, only forgets it: the epoch, its pipes and its
        processes are the parent's."""
        if self._pid != os.getpid():
            self._closed = True
            return True
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        for c in range(self._p):
            self._pipes.send(c, Cancel(self._epoch))
        self._pipes.wake()
        release(self._pool, self._own, timeout, warn=warn)
        return True
