"""One epoch of a ThreadLoader (:class:`Epoch`, what ``iter(loader)`` returns) and what it runs
(:class:`EpochRun`, closed by the epoch, its finalizer, or the loader)."""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

import datapipes as dp
from torch_threadloader.budget import BudgetTotals, ByteBudget
from torch_threadloader.epoch import seeds
from torch_threadloader.epoch.errors import LoaderTimeoutError
from torch_threadloader.epoch.hooks import ENDED, LengthCheck, choose, closed_hooks
from torch_threadloader.fetch import Workers
from torch_threadloader.kinds import EpochSpec, by_cost, strategy_of
from torch_threadloader.kinds.setup import epoch_resources, epoch_workers
from torch_threadloader.plan import Kind, LoaderPlan
from torch_threadloader.processes import process_graph
from torch_threadloader.random_state import ItemStreams
from torch_threadloader.resources import Kept, Resources
from torch_threadloader.resume import EpochRecord, find_prefetching_fetcher
from torch_threadloader.skip import ErrorPolicy
from torch_threadloader.stall import CallerWatch
from torch_threadloader.stats import LoaderStats
from torch_threadloader.userdata import Batch

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs, LoaderState

__all__ = ["DEFAULT_JOIN_TIMEOUT", "INTERRUPT_TIMEOUT", "Epoch", "EpochRun"]

#: Seconds ``close()`` waits, in all, for calls in progress (read when it runs).
DEFAULT_JOIN_TIMEOUT = dp.DEFAULT_JOIN_TIMEOUT
#: Seconds a Ctrl-C in ``next()``, or dropping an epoch, waits for calls in progress.
INTERRUPT_TIMEOUT = 0.5


class Epoch(Iterator[Batch]):
    """One epoch of a ThreadLoader: the node graph its kind's strategy builds, pulled in the
    caller's thread. Closing it (exhaustion, ``close()``, dropping it, garbage collection, the
    loader's ``close()``) stops the epoch's work and, with ``persistent_workers=False``, its
    threads. It keeps its loader alive (collecting the loader closes its open epochs)."""

    def __init__(self, inputs: EpochInputs) -> None:
        plan = inputs.plan
        _check_timeout(plan)
        kept = inputs.kept
        kept.after_fork()
        self._owner = inputs.owner  # the loader: collected, it would close the kept threads
        self._index_sampler = inputs.index_sampler
        self._by_cost = inputs.plan.max_batch_cost is not None
        self._timeout = plan.timeout
        run = self._run = EpochRun(kept, inputs.state.stats)
        # Dropping the epoch closes its run (never waiting long: gc may run on any thread).
        self._finalizer = weakref.finalize(self, _close_dropped, run)
        self._finalizer.atexit = False  # the threads' own exit hook stops them, within its bound
        resume, between = _take_pending(inputs.state)
        draws = seeds.draw(inputs, resume)
        resources, workers = _acquire(inputs, run, draws.base_seed)
        run.errors = _new_errors(inputs, resume)
        run.record = _make_record(inputs, resume, between, draws)
        run.record.progress.errors = run.errors  # this epoch's skips, not the newest epoch's
        _budget(inputs, run)
        graph = _build(inputs, run, resources, workers, draws, between)
        self._open(inputs, graph)
        run.busy = False

    def _open(self, inputs: EpochInputs, graph: dp.Node[Batch]) -> None:
        """Open ``graph`` and choose the per-batch hooks."""
        run, record = self._run, self._run.record
        assert record is not None
        with run.kept.lock:
            inputs.state.last_graph = graph
            inputs.state.record = record
        run.kept.add(run)
        try:
            it = graph.open()
        except BaseException:
            run.opened(None)
            run.close(INTERRUPT_TIMEOUT, warn=False)
            raise
        if not run.opened(it):  # closed by another thread while the graph opened: stopped now
            hooks = closed_hooks()
            self._source, self._tally, self._after, self._failed = hooks.source, hooks.tally, None, None
            return
        if run.stats is not None:
            # From here: the epoch's wall time leaves out starting its threads or processes
            # (worker processes count their CPU time from when they are up, too).
            run.stats.epoch_started()
        record.attach(it)
        length = inputs.iterable_len
        hooks = choose(
            self,
            it,
            record,
            stats=run.stats,
            budget=run.budget,
            length_check=LengthCheck(inputs.dataset, length, inputs.plan.num_workers) if length is not None else None,
        )
        watch = _caller_watch(inputs, run)
        if watch is not None:
            watch.start(hooks.tally)
        self._source, self._tally, self._after, self._failed = hooks.source, hooks.tally, hooks.after, hooks.failed
        if hooks.mapped:
            run.epoch = weakref.ref(self)

    def __iter__(self) -> Epoch:
        return self

    def __next__(self) -> Batch:
        source, run = self._source, self._run
        run.busy = True  # a close meanwhile, from any thread, makes this next() raise
        if run.watch_asleep:  # stall_report_after without workers: the watch's thread left when idle
            run.wake_watch()
        try:
            try:
                batch = next(source)
            finally:
                run.busy = False
        except StopIteration:
            self._ran_out()
            raise
        except KeyboardInterrupt:
            self._interrupted()
            raise
        except dp.EpochClosedError:
            run.closed_elsewhere = False  # said by the graph: a next() after it ends the epoch
            raise
        except dp.NodeTimeoutError as exc:
            error = self._timed_out(exc)
            del self, source, run, exc  # see below
            raise error from None
        except BaseException as exc:
            failed = self._failed
            if failed is not None:
                failed(exc)
            if run.watch is not None:  # a caught error may end the caller's loop: no watch left behind
                run.watch.nudge()
            # An exception the caller keeps holds this frame: it must not keep the epoch
            # (and its threads) alive once the caller drops the iterator.
            del self, source, run, exc, failed
            raise
        if run.closed_elsewhere:  # an item of this thread's finished after another thread's close
            run.closed_elsewhere = False
            raise dp.EpochClosedError("the epoch was closed by another thread while next() ran")
        self._tally.pulled += 1
        after = self._after
        if after is None:
            return batch
        return after(batch)

    def _ran_out(self) -> None:
        """The graph ended: the epoch is complete (unless it was closed first) and closes.
        Closed by another thread meanwhile (a sync item ran on in the caller's thread), it is
        :class:`~datapipes.EpochClosedError`: the epoch did not end."""
        run = self._run
        closer, run.closer = run.closer, None
        if run.closed_elsewhere:  # said once: a next() after it ends the epoch
            run.closed_elsewhere = False
            raise dp.EpochClosedError("the epoch was closed by another thread while next() ran") from None
        if closer is not None and closer != threading.get_ident():  # said once, too
            raise dp.EpochClosedError("the epoch was closed by another thread between next() calls") from None
        assert run.record is not None
        run.record.finish()
        self.close()
        run.closer = None  # the end closed it: no other thread's close

    def _timed_out(self, exc: dp.NodeTimeoutError) -> LoaderTimeoutError:
        """torch's timeout error for the batch the graph waited for."""
        position, indices = exc.seq, exc.item
        record = self._run.record
        if record is not None and record.tagged and isinstance(indices, tuple):  # (position, indices)
            position, indices = indices
        return LoaderTimeoutError(self._timeout, position, indices)

    def _interrupted(self) -> None:
        # Ctrl-C leaves no thread: the epoch and the loader's kept threads stop now (a call
        # in progress ends on its own); the next epoch starts new ones.
        self._run.kept.close(INTERRUPT_TIMEOUT, interrupted=True)
        self._run.close(INTERRUPT_TIMEOUT, warn=False)

    def __len__(self) -> int:
        if self._by_cost:
            raise TypeError(
                "len() of an epoch with max_batch_cost is not known before it ends: batches are cut by cost"
            )
        return len(self._index_sampler)

    def close(self) -> None:
        """Stop this epoch's work (and, unless workers are persistent, its threads)."""
        self._run.close(DEFAULT_JOIN_TIMEOUT, warn=True)


class EpochRun:
    """What an epoch runs: its graph's iterator, the pool or resources it holds, its record and
    budget. Holds no reference to the epoch (but a weak one) or the loader, so dropping the
    epoch lets its finalizer close the run; the loader's :class:`Kept` holds the open runs."""

    def __init__(self, kept: Kept, stats: LoaderStats | None) -> None:
        self.kept = kept
        self.stats = stats
        self.pid = os.getpid()
        # iter() or a next() is running: set and cleared by the consumer's thread, read by
        # close() under the lock. Closed meanwhile (closed_elsewhere), that next() (or the
        # first after that iter()) raises EpochClosedError, not StopIteration or a batch; a
        # next() after a close between calls ends the epoch.
        self.busy = True  # iter() is opening the epoch
        self.closed = False
        self.closed_elsewhere = False
        # The thread that closed the run between calls: a next() then ends the epoch in that
        # thread (as a closed generator does) and raises EpochClosedError in any other.
        self.closer: int | None = None
        # From kept.add() until opened(): a close() meanwhile marks the run closed and leaves
        # the stopping to the opener, which stops what the graph's open() started.
        self.opening = False
        self.deferred: tuple[float | None, bool] = (DEFAULT_JOIN_TIMEOUT, True)  # that close's (timeout, warn)
        self.it: dp.NodeIterator[Batch] | None = None
        self.record: EpochRecord | None = None
        self.budget: ByteBudget | None = None
        self.totals: BudgetTotals | None = None  # with worker processes: their budgets' totals
        self.errors: ErrorPolicy | None = None  # on_error: this epoch's skips (the loader's log has every epoch's)
        self.pool: dp.ThreadPool | None = None  # the kept pool of persistent workers, when this epoch has it
        self.owned: Resources | None = None  # the epoch's own threads (persistent_workers=False)
        self.epoch: weakref.ref[Epoch] | None = None  # a lean epoch, whose source close() ends
        self.watch: CallerWatch | None = None  # stall_report_after without workers: its thread
        self.watch_asleep = False  # the watch's thread is gone until a next() wakes it (set by the watch)

    def close(self, timeout: float | None, *, warn: bool) -> None:
        """Stop the run within ``timeout`` seconds in all. Idempotent, from any thread; in a
        forked child it only forgets the run (its threads, loop and processes are the parent's)."""
        if self.pid != os.getpid():
            self.closed = True  # a lock may have been held at the fork: touch nothing of the parent's
            return
        with self.kept.lock:
            if self.closed:
                return
            self.closed = True
            self.kept.epochs.discard(self)
            self.closed_elsewhere = self.busy
            if not self.busy:
                self.closer = threading.get_ident()
            if self.opening:
                self.deferred = (timeout, warn)
                return  # the opener stops the run when its graph's open() returns (opened())
        self._stop(timeout, warn=warn)

    def wake_watch(self) -> None:
        """A ``next()`` begins and the watch's thread is gone: start it again."""
        watch = self.watch
        if watch is not None:
            watch.wake()

    def opened(self, it: dp.NodeIterator[Batch] | None) -> bool:
        """The graph's ``open()`` returned ``it`` (None: it raised). False when a ``close()``
        came meanwhile: the run is stopped now, within that close's timeout and warning."""
        with self.kept.lock:
            self.it, self.opening = it, False
            closed, (timeout, warn) = self.closed, self.deferred
        if closed:
            self._stop(timeout, warn=warn)
        return not closed

    def _stop(self, timeout: float | None, *, warn: bool) -> None:
        epoch = self.epoch() if self.epoch is not None else None
        if epoch is not None:
            epoch._source = ENDED  # a next() after close() ends, as the graph's would
        if self.stats is not None:
            self.stats.epoch_ended()
        if self.budget is not None:
            self.budget.close()  # wakes workers waiting for room, before they are stopped
        deadline = dp.Deadline(timeout)
        it, record = self.it, self.record
        if record is not None and it is not None:
            record.freeze()
        stopped = False
        try:
            if self.watch is not None:
                self.watch.close(deadline.remaining())
            stopped = it is None or it.shutdown(deadline.remaining(), warn=warn)
        finally:
            if self.pool is not None:
                # A loop still in a call would hold one of the kept pool's threads: the next
                # epoch gets a new pool instead of queueing behind it.
                self.kept.resources.release_pool(self.pool, reusable=stopped)
            if self.owned is not None:
                self.owned.close(deadline.remaining(), warn=warn)


def _caller_watch(inputs: EpochInputs, run: EpochRun) -> CallerWatch | None:
    """``stall_report_after`` where the caller's thread loads each batch (no workers, a sync
    kind: no dispatcher waits): the run's watch of each ``next()``, else None."""
    plan = inputs.plan
    after = plan.stall_report_after
    if after is None or plan.num_workers > 0 or plan.in_processes or plan.kind is Kind.ASYNC:
        return None
    run.watch = CallerWatch(after, inputs.state.stalls, run, Epoch.__next__.__code__)
    return run.watch


def _close_dropped(run: EpochRun) -> None:
    """An epoch was dropped: stop its run, briefly (gc may run on any thread)."""
    try:
        run.close(INTERRUPT_TIMEOUT, warn=False)
    except Exception:
        pass


def _check_timeout(plan: LoaderPlan) -> None:
    if plan.timeout and plan.num_workers == 0 and not plan.in_processes:
        # torch accepts this at construction and refuses it here, with these words.
        raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")


def _take_pending(state: LoaderState) -> tuple[dp.StateDict | None, dp.StateDict | None]:
    """The state ``load_state_dict()`` left for this ``iter()``: (a mid-epoch state to resume,
    a state loaded between epochs: loading it did all it does, but for persistent copies)."""
    with state.kept.lock:
        pending, state.pending = state.pending, None
    if pending is not None and pending.get("finished", True):
        return None, pending
    return pending, None


def _acquire(inputs: EpochInputs, run: EpochRun, base_seed: int) -> tuple[Resources, Workers | None]:
    """The threads the epoch runs on, and its workers (:mod:`~torch_threadloader.kinds.setup`, as
    a worker process makes them): the worker processes' (none here), the loader's kept ones
    (persistent workers), or the epoch's own."""
    plan, kept, n = inputs.plan, run.kept, inputs.plan.num_workers
    workers: Workers | None = None
    if plan.in_processes:  # the workers are in the worker processes
        resources = kept.resources
    else:
        resources, owned = epoch_resources(plan, kept.resources, inputs.dataset)
        if owned:
            run.owned = resources
        if n > 0:
            workers = epoch_workers(plan, inputs.dataset, inputs.worker_init_fn, base_seed, resources, num_workers=n)
        if plan.persistent:
            with resources.lock:
                free, resources.pool_busy = not resources.pool_busy, True
            if free:  # a second live epoch of the loader runs on threads of its own
                run.pool = resources.pool(strategy_of(plan.kind).worker_threads(plan, inputs.dataset))
    strategy_of(plan.kind).adopt(resources, inputs.dataset)
    return resources, workers


def _start_states(plan: LoaderPlan, between: dp.StateDict | None) -> list[dp.StateDict | None] | None:
    """An IterableDataset's copies that live on (persistent workers): their states from a state
    loaded between epochs."""
    return between.get("datasets") if between is not None and plan.num_workers > 0 else None


def _make_record(
    inputs: EpochInputs, resume: dp.StateDict | None, between: dp.StateDict | None, draws: seeds.Draws
) -> EpochRecord:
    """The epoch's record (what it delivers, for ``state_dict()``)."""
    plan = inputs.plan
    strategy = strategy_of(plan.kind)
    # An IterableDataset's copies that live on (no workers, persistent workers): their own
    # states as this epoch starts; from a state loaded between epochs, loaded into them.
    start_states = _start_states(plan, between)
    iterable_start = (
        start_states if start_states is not None else strategy.datasets_states(inputs) if resume is None else None
    )
    batches = resume.get("batches") if resume is not None else None
    return EpochRecord(
        inputs,
        strategy,
        resume,
        base_seed=draws.base_seed,
        drew_base_seed=draws.drew_base_seed,
        loader_rng=draws.loader_rng,
        sampler_state=draws.sampler_state,
        fetcher=find_prefetching_fetcher(),
        total=len(batches) if batches is not None else None,
        eager=draws.eager if batches is None else None,
        indices=draws.indices,
        iterable_start=iterable_start,
    )


def _new_errors(inputs: EpochInputs, resume: dp.StateDict | None) -> ErrorPolicy:
    """The epoch's skipping policy (its records also go to the loader's log), from the
    records of the epoch it resumes."""
    try:
        epoch_samples: int | None = len(inputs.sampler) if inputs.plan.kind.uses_sampler else None
    except TypeError:
        epoch_samples = None
    return inputs.state.errors.new_epoch(epoch_samples, resume.get("errors", ()) if resume is not None else ())


def _budget(inputs: EpochInputs, run: EpochRun) -> None:
    """``max_bytes_in_flight``: the epoch's byte budget (``run.budget``), charged by its worker
    threads; in worker processes each process's share, summed in ``run.totals``. The loader's
    ``stats()`` shows the most recent epoch's."""
    plan = inputs.plan
    if plan.max_bytes_in_flight is None:
        return
    if plan.in_processes:  # charged in the processes
        run.totals = BudgetTotals(plan.max_bytes_in_flight, plan.worker_processes)
        with run.kept.lock:
            inputs.state.last_budget = run.totals
        return
    if plan.num_workers == 0:
        return
    assert run.record is not None
    budget = run.budget = ByteBudget(plan.max_bytes_in_flight)
    budget.needs(run.record.frontier)
    with run.kept.lock:
        inputs.state.last_budget = budget


def _build(
    inputs: EpochInputs,
    run: EpochRun,
    resources: Resources,
    workers: Workers | None,
    draws: seeds.Draws,
    between: dp.StateDict | None,
) -> dp.Node[Batch]:
    """The epoch's graph: its kind's strategy's, or the worker processes'."""
    plan = inputs.plan
    record = run.record
    assert record is not None
    pin = plan.pin_memory and _pin_or_warn(run.kept)
    spec = EpochSpec(
        inputs, resources, workers, pin, draws.indices, record.resume_part(), run.budget, policy=run.errors
    )
    spec.start_states = _start_states(plan, between)
    if workers is None and plan.own_random_state:
        # No workers: item threads and async items draw per item.
        spec.item_streams = ItemStreams(draws.base_seed, 0, type(inputs.dataset).__name__)
    if plan.per_sample_rng:
        spec.sample_rng = (draws.base_seed, _sample_epoch(inputs.state, record))
    if record.resume_part() is None:
        spec.graph_opened = record.graph_opened
    if plan.in_processes:
        graph = process_graph(spec, plan.kind.value, draws.base_seed, totals=run.totals)
        # max_batch_cost: the children load samples, this process cuts them by cost
        return by_cost.build_processes(spec, graph) if plan.max_batch_cost is not None else graph
    return strategy_of(plan.kind).build(spec, run.pool)


def _sample_epoch(state: LoaderState, record: EpochRecord) -> int:
    """The epoch number this epoch's items draw for (``per_sample_rng``): the loader counts its
    epochs from 0; ``load_state_dict()`` sets the count to the state's epoch."""
    with state.kept.lock:
        epoch = state.next_epoch
        state.next_epoch = epoch + 1
    record.sample_epoch = epoch
    return epoch


def _pin_or_warn(kept: Kept) -> bool:
    if pin_available():
        return True
    with kept.lock:
        warn, kept.pin_warned = not kept.pin_warned, True
    if warn:
        warnings.warn(
            "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used.",
            stacklevel=5,
        )
    return False


def pin_available() -> bool:
    """An accelerator is there to pin memory for."""
    return bool(torch.accelerator.is_available())
