"""One epoch in the loader's process when its work runs in worker processes: dispatch of
index batches to the children, their results put back in order, timeout, close from another
thread and lost children. Yields ``(tag, batch)`` as the in-process graph does."""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import datapipes as dp
from torch_threadloader.plan import Kind
from torch_threadloader.processes.errors import WorkerProcessError, raised_in, unpack_error
from torch_threadloader.processes.messages import (
    BatchFailed,
    Cancel,
    Credit,
    EpochEnded,
    LoadBatch,
    News,
    NoMoreBatches,
    StartEpoch,
    Taken,
    ToParent,
    WorkerLost,
)
from torch_threadloader.processes.pool import NAME
from torch_threadloader.processes.transport import ProcessTransport
from torch_threadloader.processes.turns import Result, Sent, Turns, child_resumes
from torch_threadloader.resume import tag_error
from torch_threadloader.skip import TooManyErrors

if TYPE_CHECKING:
    from torch_threadloader.processes.node import ProcessGraph

__all__ = ["END_WAIT", "ProcessEpoch"]

#: Seconds a complete epoch waits, in all, for the children's ends (and their stats).
END_WAIT = 1.0


class ProcessEpoch(dp.NodeIterator[Any]):
    """One epoch over the worker processes. The consumer's thread owns the dispatch, the
    reorder buffer and the receiving ends; ``shutdown`` may come from another thread (it only
    sends, under each child's lock, and wakes a waiting ``next()``).

    Bound: a child holds at most its graph's ``capacity`` batches plus one being handed over;
    at most ``P * (capacity + 1)`` batches are sent and not yet handed out."""

    def __init__(self, node: ProcessGraph, state: dp.StateDict | None) -> None:
        self._node = node
        self._stats = node._stats
        self._lock = threading.Lock()
        self._closed = False  # guarded by _lock
        self._pid = os.getpid()
        self._timeout = node.timeout
        self._finish = node.finish
        inputs = self._inputs = node.pool.inputs
        self._iterable = inputs.kind is Kind.ITERABLE
        self._in_order = inputs.plan.in_order
        self._pool, self._own_pool = node.pool.for_epoch()
        self._source: dp.NodeIterator[Any] | None = None
        self._open(state)
        self._books(len(self._children))
        self._start()

    # -- opening ----------------------------------------------------------------------------------
    def _open(self, state: dp.StateDict | None) -> None:
        """The children (started now where needed), the epoch's number, its sampler."""
        try:
            self._children = self._pool.started()
            self._transport = ProcessTransport(self._children)
            self._epoch = next(self._pool.epochs)
            if self._node.source is not None:
                self._source = self._node._open_source(state)
        except BaseException:
            self._release()
            raise

    def _books(self, p: int) -> None:
        """What the consumer's thread keeps of the epoch (owned by it)."""
        self._p = p
        self._per_child = self._inputs.capacity + 1  # a child's graph pulls one more before it hands one over
        self._bound = p * self._per_child
        self._sent = Sent(p)  # map-style: the batches sent, until handed out
        self._yielded = 0  # results handed out (map-style: items; iterable: batches)
        self._in_hand = [0] * p  # per child: sent, not yet received
        self._ready: dict[int, Result] = {}  # map-style, in order: j -> its result
        self._fifo: list[deque[Result]] = [deque() for _ in range(p)]  # iterable, in order
        self._any: deque[Result] = deque()  # in_order=False
        self._ended = [False] * p  # the child's graph ended (its EpochEnded came)
        self._dead: list[str | None] = [None] * p  # how the child was lost
        self._too_many: dict[int | None, TooManyErrors] = {}  # j (None: unknown) -> the error its batch raises
        self._local_of: dict[int, int] = {}  # max_bytes_in_flight: j -> its number in its child's share
        self._exhausted = False
        self._end_sent = False

    def _start(self) -> None:
        """Each child opens the epoch; then the first batches (map-style) or credits (iterable)."""
        inputs = self._inputs
        turn, resumes = child_resumes(self._node.resume, self._p, inputs.num_workers, inputs.total_workers)
        # IterableDataset, in order: whose turn it is (a worker of all P * n), and which have ended.
        self._turns = Turns(self._p, inputs.total_workers, turn)
        try:
            for c in range(self._p):
                if not self._transport.send(c, StartEpoch(self._epoch, self._node.base_seed, resumes[c])):
                    self._lost(c)
            if self._iterable:
                for c in range(self._p):
                    for _ in range(inputs.capacity):
                        self._transport.send(c, Credit(self._epoch))
                    self._in_hand[c] = inputs.capacity
            else:
                self._dispatch()
        except BaseException:
            self.shutdown(0, warn=False)
            raise

    # -- dispatch (map-style) ---------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Send batches while fewer than the bound are out (out of order: to the child with the
        fewest in hand, while it has room); after the last, :class:`NoMoreBatches` to each."""
        source = self._source
        if source is None or self._exhausted:
            return
        while self._sent.count - self._yielded < self._bound:
            c = None if self._in_order else min(range(self._p), key=self._in_hand.__getitem__)
            if c is not None and self._in_hand[c] >= self._per_child:
                return
            try:
                position, indices = next(source)
            except StopIteration:
                self._exhausted = True
                break
            self._send_batch(position, indices, c)
        if self._exhausted and not self._end_sent:
            self._end_sent = True
            for c in range(self._p):
                self._transport.send(c, NoMoreBatches(self._epoch))

    def _send_batch(self, position: int, indices: Any, c: int | None) -> None:
        if c is None:
            # Batch p is worker p % W's, in a resumed epoch too (its positions start past 0
            # and may skip some): process p % P, which gives it to its thread (p // P) % n.
            c = position % self._p
            message = LoadBatch(self._epoch, indices, position // self._p)
        else:
            message = LoadBatch(self._epoch, indices)
        self._sent.add(c, position, indices)
        self._in_hand[c] += 1
        if self._dead[c] is None and not self._transport.send(c, message):
            self._lost(c)

    # -- receiving --------------------------------------------------------------------------------
    def _receive(self, c: int, message: ToParent | WorkerLost) -> None:
        """Child ``c``'s message (or the news that it was lost), dispatched on its type."""
        if isinstance(message, WorkerLost):
            self._dead[c] = message.why
            self._pool.mark_dead(self._children[c])
            return
        current = message.epoch == self._epoch
        if message.news is not None:
            self._news(c, message.news, current)
        if not current:
            return  # an earlier epoch's
        if isinstance(message, EpochEnded):
            self._ended[c] = True
            self._node.child_stats(c, message.stats)
            return
        self._in_hand[c] -= 1
        if self._iterable:
            result = Result(message, message.tag, c)
            (self._fifo[c] if self._in_order else self._any).append(result)
            return
        j, k = self._sent.received(c, message.tag)
        if self._node.budget is not None:
            self._local_of[j] = k
        if self._in_order:
            self._ready[j] = Result(message, j, c)
        else:
            self._any.append(Result(message, j, c))

    def _lost(self, c: int) -> None:
        self._receive(c, self._transport.lose(c))

    def _news(self, c: int, news: News, current: bool) -> None:
        """Child ``c``'s news (see ``ProcessGraph.merge_news``); its skip records of this epoch
        name their batch by its place in the epoch, and one past ``max_errors`` fails its batch."""
        policy = self._node.merge_news(c, news, current)
        if policy is None or not news.errors:
            return
        for record in news.errors:
            j = self._sent.of_local(c, record.get("batch"))
            record["batch"] = self._sent.items[j][0] if j is not None and j in self._sent.items else None
            too_many = policy.add([record])
            if too_many is not None:
                self._too_many.setdefault(j, too_many)

    def _raise_if_closed(self) -> None:
        with self._lock:
            closed = self._closed
        if closed:  # by another thread, which may be stopping the processes too
            raise dp.EpochClosedError(f"{NAME}: the epoch was closed by another thread while next() waited")

    def _wait(self, deadline: dp.Deadline | None) -> None:
        """Wait for a message or a lost child (or a close, or the deadline), and take it in."""
        self._raise_if_closed()
        received = self._transport.wait(deadline)
        if isinstance(received, str):  # CLOSED: woken by a close
            raise dp.EpochClosedError(f"{NAME}: the epoch was closed by another thread while next() waited")
        if not received:
            raise self._timeout_error()
        for c, message in received:
            self._receive(c, message)

    def _wait_ends(self) -> None:
        """The epoch is complete: take each child's end (it carries its graph's stats), within
        ``END_WAIT`` seconds in all (they come right after the last batch)."""
        deadline = dp.Deadline(END_WAIT)
        while True:
            pending = [c for c in range(self._p) if not self._ended[c] and self._dead[c] is None]
            if not pending or not deadline.remaining():
                return
            received, closed = self._transport.wait_ends(pending, deadline)
            for c, message in received:
                self._receive(c, message)
            for c in closed:
                self._ended[c] = True

    def _timeout_error(self) -> dp.NodeTimeoutError:
        if self._iterable:
            return dp.NodeTimeoutError(NAME, self._yielded, None, self._timeout)
        items = self._sent.items
        j = self._yielded if self._in_order else min(items, default=self._sent.count)
        return dp.NodeTimeoutError(NAME, j, items.get(j), self._timeout)

    # -- handing out ------------------------------------------------------------------------------
    def _take(self) -> Result | None:
        """The next result to hand out, or None; raises for a lost child that holds it."""
        if not self._in_order:
            if self._any:
                return self._any.popleft()
            self._check_dead_any()
            return None
        if self._iterable:
            result, waits_on = self._turns.take(self._fifo, self._ended)
            if waits_on is not None and self._dead[waits_on] is not None:
                self._fail(waits_on, None)
            return result
        j = self._yielded
        result = self._ready.pop(j, None)
        if result is None and j < self._sent.count:
            c = self._sent.items[j][0] % self._p  # the process its position went to
            if self._dead[c] is not None:
                self._fail(c, j)
        return result

    def _check_dead_any(self) -> None:
        """Out of order, nothing ready: raise for a lost child that held batches."""
        for c, dead in enumerate(self._dead):
            if dead is not None and (self._in_hand[c] > 0 or (self._iterable and not self._ended[c])):
                self._fail(c, self._sent.oldest_out(c))

    def _fail(self, c: int, j: int | None) -> None:
        self._raise_if_closed()  # the loader's close() also stops the processes
        child = self._children[c]
        where = ""
        if j is not None and j in self._sent.items:
            position, indices = self._sent.items[j]
            where = f" while it held batch {position} (indices {indices!r})"
        message = f"{self._dead[c]}{where}; the epoch cannot go on without its batches"
        self.shutdown(0, warn=False)
        raise WorkerProcessError(
            message, process=c, pid=child.pid, exitcode=child.process.exitcode, worker=child.describe()
        )

    def _finished(self) -> bool:
        if self._iterable:
            return all(self._ended[c] and not self._fifo[c] for c in range(self._p)) and not self._any
        return self._exhausted and self._yielded >= self._sent.count

    def __next__(self) -> Any:
        with self._lock:
            if self._closed:
                raise StopIteration
        deadline = None if self._timeout is None else dp.Deadline(self._timeout)
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
        message, key, c = result.message, result.key, result.child
        del result
        self._yielded += 1
        if self._iterable:
            tag = self._iterable_tag(c, key)
        else:
            tag, too_many = self._map_taken(key, c)
            if too_many is not None:  # as in one process: the batch that crossed the limit raises it
                self._stats.add(items_out=1)
                tag_error(too_many, tag)
                cause = unpack_error(message.error) if isinstance(message, BatchFailed) else None
                del message  # e.g. every sample of it failed
                raise too_many from cause
        self._stats.add(items_out=1)
        if isinstance(message, BatchFailed):
            exc = self._error(message, c, tag)
            del message
            raise exc
        batch = message.batch
        del message
        if self._finish is not None:
            try:
                batch = self._finish(batch)
            except BaseException as exc:
                tag_error(exc, tag)
                raise
        return tag, batch

    def _iterable_tag(self, c: int, tag: Any) -> Any:
        """One more credit to child ``c`` (it may send one more batch); its tag with the
        worker's number here (``(worker, state, ended[, items])``)."""
        if not self._ended[c] and self._dead[c] is None:
            self._in_hand[c] += 1
            self._transport.send(c, Credit(self._epoch))
        if tag is None:
            return None
        worker, *rest = tag
        return (int(worker) * self._p + c, *rest)

    def _map_taken(self, j: int, c: int) -> tuple[int, TooManyErrors | None]:
        """Batch ``j`` handed out: its bytes given back to its child, its position, the
        ``TooManyErrors`` it raises (if its records crossed ``max_errors``); more dispatched."""
        k = self._local_of.pop(j, None)
        if k is not None and self._dead[c] is None:  # its bytes are the caller's now
            self._transport.send(c, Taken(self._epoch, k))
        too_many = self._too_many.pop(j, None) or self._too_many.pop(None, None)
        position = self._sent.items.pop(j)[0]  # the batch's position in the epoch
        self._dispatch()
        return position, too_many

    def _error(self, message: BatchFailed, c: int, tag: Any) -> BaseException:
        """The batch's exception as the child raised it, with a note naming where."""
        where = (f" for worker {tag[0]}'s batch" if tag else "") if self._iterable else f" for batch {tag}"
        exc = raised_in(message.error, f"{self._children[c].describe()}{where}")
        if tag is not None:
            tag_error(exc, tag)
        return exc

    # -- state and close --------------------------------------------------------------------------
    def state_dict(self) -> dp.StateDict:
        if self._source is None:
            return {}
        return {"source": self._source.state_dict()}

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """End the epoch: the children stop its work (their processes stay for the next
        epoch, unless this epoch started its own). Returns at once, but for processes the
        epoch started itself (stopped within ``timeout``). In a forked child of the process
        that opened it, only forgets it: the epoch, its pipes and its processes are the parent's."""
        if self._pid != os.getpid():
            self._closed = True
            return True
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        for c in range(self._p):
            self._transport.send(c, Cancel(self._epoch))
        self._transport.wake()
        if self._source is not None:
            self._source.close()
        self._release(timeout, warn=warn)
        return True

    def _release(self, timeout: float | None = 0, *, warn: bool = False) -> None:
        if self._own_pool is not None:
            self._own_pool.close(timeout, warn=warn)
        else:
            self._pool.release()
