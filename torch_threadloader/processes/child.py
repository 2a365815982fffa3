"""One worker process of a ThreadLoader with ``worker_processes=P``: it runs the loader's own
thread graph (``graph.build_graph``: its ``num_workers`` threads, ``item_concurrency``, async
fetching) over the batches its parent sends, and sends each batch back through shared memory
(the messages: ``processes.messages``).

Lifetime: the child reads its inbox on one thread; the end of the inbox (the parent closed it
or died, even by SIGKILL) makes the child exit at once (``os._exit``), so no child outlives its
parent. SIGINT is ignored: Ctrl-C is the parent's to handle, and it ends the children.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import warnings
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import cast

import torch
import torch.multiprocessing

import datapipes as dp
from torch_threadloader.budget import ByteBudget
from torch_threadloader.fetch import Workers
from torch_threadloader.kinds import EpochSpec, build_graph, strategy_of
from torch_threadloader.kinds.setup import epoch_resources, epoch_workers
from torch_threadloader.kinds.spec import ChildObjects
from torch_threadloader.over_budget import OverBudgetLog
from torch_threadloader.processes.child_parts import (
    EpochInbox,
    ShareOfWorkers,
)
from torch_threadloader.processes.errors import pack_error
from torch_threadloader.processes.inputs import ChildInputs
from torch_threadloader.processes.messages import (
    BatchDone,
    BatchFailed,
    BatchTag,
    Cancel,
    EpochEnded,
    Exit,
    Needed,
    News,
    SendStacks,
    Stacks,
    StartEpoch,
    TaggedBatch,
    Taken,
    ToChild,
    ToParent,
    batch_tag,
)
from torch_threadloader.resources import Resources
from torch_threadloader.skip import ErrorPolicy
from torch_threadloader.stall.stacks import other_threads
from torch_threadloader.stats import LoaderStats
from torch_threadloader.tags import NO_TAG, tag_of
from torch_threadloader.userdata import Batch

__all__ = ["CHILD_JOIN_TIMEOUT", "child_main"]

#: Seconds a child waits, in all, for its threads when an epoch ends or the child exits.
CHILD_JOIN_TIMEOUT = 5.0
#: Every epoch up to this one is cancelled (``Exit``).
_ALL = 1 << 62


def child_main(
    index: int, inputs: ChildInputs, inbox: Connection, outbox: Connection, close_here: list[Connection]
) -> None:
    """The body of worker process ``index`` (``multiprocessing.Process`` target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for conn in close_here:  # started by fork: the parent's ends of the pipes are here too
        conn.close()
    torch.set_num_threads(1)  # as torch's worker processes; each loader thread sets its own too
    plan = inputs.plan
    if plan.process_nice:
        # Before any thread starts: on Linux the nice level is per thread, and inherited.
        os.nice(plan.process_nice)
    if plan.process_affinity is not None:  # per thread too, and inherited by the threads it starts
        os.sched_setaffinity(0, plan.process_affinity[index])
    _Child(index, inputs, inbox, outbox).run()


class _Child:
    """Owns the process's threads: the inbox reader (daemon: it ends the process when the
    parent goes) and, per epoch, the graph's threads, run from the main thread."""

    def __init__(self, index: int, inputs: ChildInputs, inbox: Connection, outbox: Connection) -> None:
        self.index = index
        self.inputs = inputs
        self.plan = inputs.graph_plan()  # what the child's graphs are built from
        self.inbox = inbox
        self.outbox = outbox
        self.queue: queue.SimpleQueue[ToChild] = queue.SimpleQueue()
        # The main thread sends batches, the inbox reader the stacks it is asked for: one at a time.
        self.send_lock = threading.Lock()
        self.lock = threading.Lock()
        self.current: tuple[int, dp.NodeIterator[TaggedBatch]] | None = None  # guarded by lock
        # max_bytes_in_flight: the current epoch's share of the budget, and the batch the
        # parent last named as needed next (a Needed may come before its epoch's budget is made).
        self.budget: tuple[int, ByteBudget] | None = None  # guarded by lock
        self.needed: tuple[int, int] | None = None  # (epoch, number); guarded by lock
        self.cancelled = -1  # epochs up to this one are cancelled; guarded by lock
        self.held: StartEpoch | Exit | None = None  # a message an epoch's inbox read for the main loop
        # The child's own stats (drained to the parent with each batch); its error policy is
        # made per epoch, its records go to the parent, which counts ``max_errors``.
        plan = inputs.plan
        self.stats = LoaderStats(inputs.num_workers, plan.item_concurrency, drained=True) if plan.keep_stats else None
        self.errors: ErrorPolicy | None = None  # the current epoch's
        # max_batch_cost with an IterableDataset: the current epoch's samples over the budget
        # (its workers cut them), drained to the parent with each message (it records and warns).
        self.over_budget = OverBudgetLog(warn=False)
        # persistent_workers: the pools, loop and workers kept across epochs (made on first use)
        self.kept = Resources(inputs.dataset, torch.get_num_threads())

    # -- the inbox reader ----------------------------------------------------------------------
    def receive(self) -> None:
        try:
            while True:
                message: ToChild = self.inbox.recv()
                try:
                    if isinstance(message, Taken | Needed):  # now, on this thread: a worker may wait for it
                        self.budget_news(message)
                        continue
                    if isinstance(message, SendStacks):  # now, on this thread: the others may be stuck
                        self.send(Stacks(message.epoch, _capped(other_threads())))
                        continue
                    if isinstance(message, Cancel):
                        self.cancel(message.epoch)
                    elif isinstance(message, Exit):
                        self.cancel(_ALL)
                except Exception as exc:  # the reader must live on: the parent waits on its replies
                    warnings.warn(
                        f"worker process {self.index}: handling {type(message).__name__} failed: {exc!r}",
                        RuntimeWarning,
                        stacklevel=1,
                    )
                self.queue.put(message)
                if isinstance(message, Exit):
                    return
        except (EOFError, OSError):
            os._exit(0)  # the parent closed the pipe without Exit, or died: go now

    def budget_news(self, message: Taken | Needed) -> None:
        """A batch of this share was taken (its bytes given back), or is the one the caller
        needs next (admitted past the share). Under the lock, so the epoch's budget, made on
        the main thread, is told the latest batch needed whichever comes first."""
        with self.lock:
            if isinstance(message, Needed) and (self.needed is None or message.epoch >= self.needed[0]):
                # An epoch being stopped may still name a batch after the next epoch named its own.
                self.needed = (message.epoch, message.number)
            budget = self.budget
            if budget is None or budget[0] != message.epoch:
                return
            if isinstance(message, Taken):
                budget[1].release(message.number)
            else:
                budget[1].needs(message.number)

    def cancel(self, epoch: int) -> None:
        """Stop every epoch up to ``epoch`` now: a ``next()`` the main thread waits in raises;
        the main thread closes the epoch's threads within its bound."""
        with self.lock:
            self.cancelled = max(self.cancelled, epoch)
            current, budget = self.current, self.budget
        if budget is not None and budget[0] <= self.cancelled:
            budget[1].close()  # wakes workers waiting for room, before they are stopped
        if current is not None and current[0] <= self.cancelled:
            current[1].shutdown(0, warn=False)

    # -- the main thread -----------------------------------------------------------------------
    def run(self) -> None:
        threading.Thread(target=self.receive, name="threadloader-process-inbox", daemon=True).start()
        try:
            while True:
                message = self.held or self.queue.get()
                self.held = None
                if isinstance(message, Exit):
                    return
                if isinstance(message, StartEpoch):
                    self.epoch(message)
                # anything else belongs to an epoch that is over
        finally:
            self.kept.close(CHILD_JOIN_TIMEOUT, warn=False)

    def send(self, message: ToParent) -> None:
        data = ForkingPickler.dumps(message)
        with self.send_lock:
            self.outbox.send_bytes(data)

    def news(self) -> News | None:
        """What the parent's stats and skip records lack since the last message; None when nothing."""
        delta = self.stats.drain() if self.stats is not None else None
        policy = self.errors
        records = policy.drain() if policy is not None and policy.skips else None
        with self.lock:
            budget = self.budget
        report = budget[1].report() if budget is not None else None
        over = self.over_budget.drain()
        if delta is None and not records and report is None and not over:
            return None
        return News(stats=delta, errors=records or None, budget=report, over_budget=over or None)

    def send_result(self, epoch: int, tag: BatchTag, batch: Batch) -> None:
        news = self.news()
        try:
            data = ForkingPickler.dumps(BatchDone(epoch, tag, batch, news))
        except Exception as exc:  # the batch cannot travel: that batch fails, with the reason
            exc.add_note(f"the batch could not be sent from worker process {self.index} to the loader's process")
            data = ForkingPickler.dumps(BatchFailed(epoch, tag, pack_error(exc), news))
        with self.send_lock:
            self.outbox.send_bytes(data)

    def open_budget(self, epoch: int, share: int) -> ByteBudget:
        """Epoch ``epoch``'s share of the byte budget, told the batch the parent named as
        needed next if its :class:`Needed` came first."""
        budget = ByteBudget(share)
        with self.lock:
            self.budget = (epoch, budget)
            if self.needed is not None and self.needed[0] == epoch:
                budget.needs(self.needed[1])
        return budget

    def epoch(self, start: StartEpoch) -> None:
        """Run epoch ``start.epoch``: build the loader's graph over this child's share and
        serve it until it ends, is cancelled, or a later epoch or :class:`Exit` comes."""
        epoch = start.epoch
        with self.lock:
            if self.cancelled >= epoch:
                return
        inputs = self.inputs
        strategy = strategy_of(inputs.kind)
        iterable = not strategy.uses_sampler  # its workers read their own streams: credits, no indices
        # Made as the loader's process makes an epoch's (kinds.setup), for the loader's workers:
        # this child's threads run its share of them.
        resources, _ = epoch_resources(self.plan, self.kept, inputs.dataset)
        every = epoch_workers(
            inputs.plan,
            inputs.dataset,
            inputs.worker_init_fn,
            start.base_seed,
            resources,
            num_workers=inputs.total_workers,
        )
        workers = ShareOfWorkers(every, self.index, inputs.count, inputs.num_workers)
        strategy.adopt(resources, inputs.dataset)
        inbox = EpochInbox(self.queue, epoch)
        # Each epoch's graph records into its own policy: a call of an epoch that was stopped
        # (break) may still record when it ends, and its records are not this epoch's.
        self.errors = ErrorPolicy(inputs.on_error, None)
        self.over_budget = OverBudgetLog(warn=False)  # as the policy: a stopped epoch's records are not this one's
        share = inputs.budget_share
        budget = self.open_budget(epoch, share) if share is not None and not iterable else None
        spec = EpochSpec.in_child(
            self.plan,
            ChildObjects(
                inputs.dataset, inputs.collate_fn, self.stats, self.errors, inputs.sample_cost, self.over_budget
            ),
            resources,
            cast(Workers, workers),
            None if iterable else inbox,
            start.resume,
            budget,
            None if iterable else inbox.worker_of,
        )
        try:
            self.open_and_serve(epoch, spec, inbox if iterable else None, budget)
        finally:
            self.held = self.held or inbox.held
            if resources is not self.kept:
                resources.close(CHILD_JOIN_TIMEOUT, warn=False)

    def open_and_serve(
        self, epoch: int, spec: EpochSpec, credits: EpochInbox | None, budget: ByteBudget | None
    ) -> None:
        """Open the epoch's graph and :meth:`serve` it; then stop it (its budget first: that
        wakes workers waiting for room)."""
        it: dp.NodeIterator[TaggedBatch] | None = None
        try:
            graph = build_graph(spec, self.inputs.kind, None)
            it = graph.open()
            with self.lock:
                self.current = (epoch, it)
                cancelled = self.cancelled >= epoch
            if not cancelled:
                self.serve(epoch, it, credits, graph)
        finally:
            with self.lock:
                self.current = self.budget = None
            if budget is not None:
                budget.close()
            if it is not None:
                it.shutdown(CHILD_JOIN_TIMEOUT, warn=False)

    def serve(
        self, epoch: int, it: dp.NodeIterator[TaggedBatch], credits: EpochInbox | None, graph: dp.Node[TaggedBatch]
    ) -> None:
        """Send each batch of the epoch's graph; with ``credits`` (an IterableDataset) one per
        credit the parent sent. The epoch's end carries the graph's ``stats()``."""
        while True:
            if credits is not None and not credits.credit():
                return
            try:
                tag, batch = next(it)
            except StopIteration:
                it.shutdown(CHILD_JOIN_TIMEOUT, warn=False)
                self.send(EpochEnded(epoch, graph.stats(), self.news()))
                return
            except dp.EpochClosedError:
                return  # cancelled
            except Exception as exc:
                failed = tag_of(exc)
                self.send(
                    BatchFailed(epoch, batch_tag(None if failed is NO_TAG else failed), pack_error(exc), self.news())
                )
                del exc
                continue
            self.send_result(epoch, tag, batch)
            del batch


#: The most stack lines a child sends its parent in one answer: a small message, so the reader
#: thread that sends it is never held up by a full pipe (and takes its parent's next message).
MAX_STACK_LINES = 200


def _capped(
    threads: tuple[tuple[str, str | None, tuple[str, ...]], ...],
) -> tuple[tuple[str, str | None, tuple[str, ...]], ...]:
    """Each thread's innermost lines, at most :data:`MAX_STACK_LINES` in all."""
    per_thread = max(4, MAX_STACK_LINES // max(1, len(threads)))
    return tuple((name, stage, lines[-per_thread:]) for name, stage, lines in threads[: MAX_STACK_LINES // 4])
