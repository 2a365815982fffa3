"""ThreadLoader: torch's DataLoader, batch for batch, with threads for workers."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterable
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

import datapipes as dp
from datapipes.dispatch.stall import check_stall_after
from torch_threadloader.budget import ByteBudget
from torch_threadloader.concurrency import async_prefetch, warn_if_unreachable
from torch_threadloader.epoch import Epoch, LoaderTimeoutError
from torch_threadloader.fetch import is_async_dataset
from torch_threadloader.inputs import EpochInputs, LoaderState
from torch_threadloader.kinds import KindStrategy, strategy_of
from torch_threadloader.kinds.by_cost import (
    check_cost_mode,
    check_cost_sync,
    check_group_window,
    check_max_batch_cost,
    check_sample_cost,
)
from torch_threadloader.kinds.checks import check_positive, check_settings, checked_setting
from torch_threadloader.kinds.stragglers import check_defer_stragglers, check_straggler_window
from torch_threadloader.plan import PLAN_SOURCES, Kind, kind_of, make_plan
from torch_threadloader.processes import (
    check_context,
    check_process_affinity,
    check_process_nice,
    check_worker_processes,
    resolve_context,
)
from torch_threadloader.random_state import install as install_random_hooks
from torch_threadloader.resources import Kept
from torch_threadloader.resume import (
    EpochRecord,
    as_tensor_state,
    draws_from_global,
    gather_ranks,
    loader_config,
    pick_rank,
    replay_epoch,
    restore_generators,
    stateful_sampler,
)
from torch_threadloader.skip import ErrorLog, ErrorRecord
from torch_threadloader.stall import StallLog, StallReport
from torch_threadloader.stats import LoaderStats, verdict
from torch_threadloader.userdata import Batch, Index, Sample
from torch_threadloader.worker_info import install_torch_hook, resolve_worker_copy, resolve_worker_method

__all__ = ["LoaderTimeoutError", "ThreadLoader"]

T_co = TypeVar("T_co", covariant=True)

#: Seconds ``close()`` waits, in all, for calls in progress before it warns and returns
#: (read when ``close()`` runs).
DEFAULT_JOIN_TIMEOUT = dp.DEFAULT_JOIN_TIMEOUT

install_torch_hook()
install_random_hooks()  # each worker owns its global random state, as a worker process does

#: Settings the loader's threads, processes or stats were made for: set after construction, a
#: ``ValueError`` (as torch refuses ``batch_size``): build a new loader instead.
FIXED_AFTER_INIT = frozenset({"worker_processes", "worker_method", "stats", "keep_stats", "on_error", "max_errors"})


class ThreadLoader(DataLoader[T_co]):
    """A :class:`torch.utils.data.DataLoader` whose workers are threads of this process.

    Takes DataLoader's whole signature, with the same defaults and the same errors for
    invalid combinations, and yields the same batches in the same order for the same
    arguments and ``generator`` seed (any order when ``in_order=False``). Worker semantics are
    torch's: batch ``i`` is loaded by worker ``i % num_workers``; each worker has its own
    copy of the dataset (``worker_copy``), its ``WorkerInfo`` (``get_worker_info()`` answers per thread)
    and one ``worker_init_fn`` call; ``persistent_workers=False`` gives each epoch its own
    threads (started at ``iter()``, gone when it ends) and a new base seed, ``True`` keeps
    them, runs ``worker_init_fn`` once and draws the base seed once. The sampler is drawn
    from in the caller's thread, when torch draws from it. Extra arguments:

    * ``item_concurrency``: how many items of one batch are fetched at once (``dataset[i]``
      calls on a thread pool; a dataset with ``__getitems__`` fetches its batch itself). For
      an async dataset, items per worker shared by every batch loading (see below).
      Map-style datasets only: more than 1 for an IterableDataset or a graph is a ``ValueError``.
    * ``return_indices``: yield ``(indices, batch)`` pairs (map-style datasets).
    * ``worker_processes``: run the loader's thread graph in that many worker processes
      (``multiprocessing_context`` picks their start method: forkserver by default); the same
      batches, order, errors, ``timeout``, ``state_dict()``, ``stats()`` and ``on_error``
      (see ``docs/processes.md``); ``max_bytes_in_flight`` is split between the processes.
      ``process_nice``: added to those processes' nice level (Linux: all their threads).
      ``process_affinity``: the CPUs those processes run on (Linux): CPU numbers for all, or
      one collection per process.
    * ``worker_method``: torch's spelling of where workers run (``WorkerInfo.worker_method``):
      ``"thread"`` (the default) or ``"multiprocessing"`` (``num_workers`` worker processes of
      one thread each, unless ``worker_processes`` is given); else a ``ValueError``.
    * ``worker_copy``: each worker's copy of the dataset, ``"shallow"`` (``copy.copy``),
      ``"deep"`` (``copy.deepcopy``: its containers are the worker's own) or ``"pickle"``
      (pickled and unpickled on the worker's thread, as a worker process gets it: every object,
      ``str`` and ``int`` too, is one that thread made, so on free-threaded Python workers that
      read it do not contend on its reference counts; each worker then holds its own copy of
      the dataset's objects, arrays and tensors included). ``None`` (the default): ``"pickle"``
      on a free-threaded build with the GIL off, ``"shallow"`` otherwise; ``loader.worker_copy``
      is the one chosen. One that cannot be deep-copied or pickled gets shallow copies, with
      one warning. A ``worker_init_fn`` holding the dataset (a bound method, a partial) acts on
      the worker's copy, as torch's pickling gives it.
    * ``own_random_state``: each worker owns torch's, Python's and NumPy's global random state
      inside its calls, seeded as torch seeds worker ``i`` (the default, as in torch's worker
      processes; see ``docs/guide.md``). ``False`` leaves the workers on the process's shared
      state: every torch call in a worker then skips a ``TorchFunctionMode`` (about 1-2 us a
      call), for datasets that never draw from, or seed, the global generators.
    * ``per_sample_rng``: run each ``dataset[i]`` (map-style, sync, in threads) under draws of
      its own, ``sample_generator(base_seed, epoch, i)``: torch's random functions called
      without ``generator=`` on CPU and ``torch.random.thread_safe_generator()`` draw from it,
      so the same ``generator`` seed gives the same batches for any ``num_workers`` and
      ``item_concurrency`` (torch's global generator is not touched; Python's ``random`` and
      NumPy's global generators are not reached). See ``docs/guide.md``.
    * ``defer_stragglers``: each batch is the first ``batch_size`` samples to finish (fetched
      one by one, ``num_workers * item_concurrency`` at once), so a slow sample goes into a
      later batch instead of holding up its own (and, ``in_order=True``, every batch behind
      it). Every sample of the epoch once, every batch full but the last (``drop_last`` as
      torch's: the last samples of the order are left out), so every rank of a
      ``DistributedSampler`` gets as many batches; ``state_dict()`` records the samples
      delivered. ``straggler_window``: no sample ``straggler_window`` or more past the oldest
      one not yet delivered (in the epoch's order) is started, so a slow sample is delivered
      at the latest that far on and a state stays small (None: four times the samples that
      may be in flight, and more). Map-style datasets with ``num_workers > 0`` and async
      datasets, cut into batches by ``batch_size`` (not a ``batch_sampler``); without
      ``worker_processes`` and ``on_error``/``max_bytes_in_flight``: else a ``ValueError``.
      See ``docs/guide.md``, "Stragglers".
    * ``max_batch_cost`` with ``sample_cost``: batches cut after loading by cost, not count.
      ``sample_cost(sample)`` (the loaded, transformed sample) gives a non-negative int; a batch
      takes samples in the epoch's order until the next would pass ``max_batch_cost``, and at
      most ``batch_size``. ``cost_mode``: ``"sum"`` (packing) or ``"padded"`` (samples times the
      largest cost). A sample over the budget alone is a batch of one, never dropped
      (``BatchCostWarning``, ``stats()["over_budget"]``). ``group_window``: samples sorted by
      cost (stably) within each window of that many positions of the order, before the cut.
      ``cost_sync``: with ranks (a ``DistributedSampler`` in an initialized default process
      group; None detects it, True/False force it) every batch's size is agreed by one
      ``all_reduce(MIN)``, so every rank cuts as many batches. ``len()`` is a ``TypeError``.
      Exact ``state_dict()``. Map-style (sync or async) datasets cut by ``batch_size``, on
      threads or ``worker_processes``; an ``IterableDataset``: each worker cuts its own stream,
      a worker process's in that process (the same batches as threads; ``cost_sync=True`` ends
      every rank's epoch at the first rank's end). Without ``defer_stragglers``, ``on_error`` skipping or
      ``max_bytes_in_flight``: else a ``ValueError``. See ``docs/guide.md``, "Batches by cost".

    Async datasets (``async def __getitem__`` or ``__getitems__``) run on an event-loop
    thread, batch ``i`` as worker ``i % num_workers``. The item is the unit of concurrency:
    up to ``max(num_workers, 1) * item_concurrency`` coroutines in flight across every batch
    loading (``max(num_workers, 1) * prefetch_factor`` batches), a freed slot taken at once by
    the next item in the epoch's order, so a slow item holds one slot, not its batch's; a
    worker's batches are collated in its order. The dataset's (each worker copy's) ``aclose()``
    is awaited when the loop closes. A :mod:`datapipes` node graph as the dataset runs once
    per epoch (it owns its concurrency); with ``num_workers > 0`` one thread runs it ahead.
    ``multiprocessing_context`` is checked as torch checks it; it starts worker processes
    (``worker_processes``), and on threads has no effect (a warning says so).

    Bounds: at most ``max(num_workers, 1) * prefetch_factor`` batches are loading or waiting.
    Errors: an exception from the dataset, ``collate_fn`` or ``worker_init_fn`` is raised by
    ``next()`` for its batch as the same object; the following ``next()`` goes on.
    ``timeout`` raises :class:`LoaderTimeoutError` (a ``RuntimeError`` and a
    ``TimeoutError``) naming the batch and its indices. ``stall_report_after`` (seconds, None:
    off): a ``next()`` that has waited that long (and again at each doubling) warns a
    :class:`LoaderStallWarning` and logs on the ``torch_threadloader`` logger what it waits for
    (the batch, the samples in flight and their stages, the stacks of the threads that hold
    them), stopping nothing; :meth:`stalls` returns the reports. Close: ``break``, ``del``, garbage
    collection, exhaustion or ``close()`` of an epoch's iterator stops its work;
    :meth:`close` stops everything the loader runs, within one bounded wait. The loader
    pickles and deep-copies as its settings (no threads are copied).
    """

    def __init__(
        self,
        dataset: Dataset[T_co],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: torch.utils.data.Sampler[Index] | Iterable[Index] | None = None,
        batch_sampler: torch.utils.data.Sampler[list[Index]] | Iterable[list[Index]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Sample]], Batch] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: str | BaseContext | None = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        item_concurrency: int = 1,
        return_indices: bool = False,
        stats: bool = False,
        on_error: str | Callable[[Index, BaseException], bool] = "raise",
        max_errors: int | float | None = None,
        max_bytes_in_flight: int | None = None,
        worker_processes: int = 0,
        process_nice: int = 0,
        process_affinity: Iterable[int] | Iterable[Iterable[int]] | None = None,
        worker_method: str | None = None,
        worker_copy: str | None = None,
        per_sample_rng: bool = False,
        defer_stragglers: bool = False,
        straggler_window: int | None = None,
        own_random_state: bool = True,
        max_batch_cost: int | None = None,
        sample_cost: Callable[[Sample], int] | None = None,
        cost_mode: str = "sum",
        group_window: int | None = None,
        cost_sync: bool | None = None,
        stall_report_after: float | None = 300,
    ) -> None:
        # -- worker processes (docs/processes.md) --
        self.worker_method = worker_method
        num_workers, worker_processes = resolve_worker_method(worker_method, num_workers, worker_processes)
        self.worker_processes = check_worker_processes(worker_processes)
        self.process_nice = check_process_nice(process_nice, self.worker_processes)
        self.process_affinity = check_process_affinity(process_affinity, self.worker_processes)
        # -- end worker processes --
        check_positive("item_concurrency", item_concurrency)
        super().__init__(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            drop_last=drop_last,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=None,
            generator=generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        self.multiprocessing_context = multiprocessing_context  # checked as torch checks it
        self.item_concurrency = item_concurrency
        self.worker_copy = resolve_worker_copy(
            worker_copy, dataset, copied=self.num_workers > 0 or self.worker_processes > 0
        )
        if not isinstance(per_sample_rng, bool):
            raise TypeError(f"per_sample_rng must be a bool, got {per_sample_rng!r}")
        self.per_sample_rng = per_sample_rng
        if not isinstance(own_random_state, bool):
            raise TypeError(f"own_random_state must be a bool, got {own_random_state!r}")
        self.own_random_state = own_random_state
        self.defer_stragglers = check_defer_stragglers(defer_stragglers)
        self.straggler_window = check_straggler_window(straggler_window)
        self.max_batch_cost = check_max_batch_cost(max_batch_cost)
        self.sample_cost = check_sample_cost(sample_cost)
        self.cost_mode = check_cost_mode(cost_mode)
        self.group_window = check_group_window(group_window)
        self.cost_sync = check_cost_sync(cost_sync)
        self.stall_report_after = check_stall_after("stall_report_after", stall_report_after)
        self.return_indices = bool(return_indices)
        # Kept under its own name, where a framework that rebuilds the loader reads it (vars(loader),
        # as Lightning does); the class's ``stats`` (the method) comes first for ``loader.stats``.
        self.__dict__["stats"] = bool(stats)
        self.on_error = on_error
        self.max_errors = max_errors
        errors = ErrorLog(on_error, max_errors)
        if max_bytes_in_flight is not None:
            ByteBudget(max_bytes_in_flight)  # refuses a bad value now
        self.max_bytes_in_flight = max_bytes_in_flight
        is_iterable = isinstance(dataset, IterableDataset)
        is_async = is_async_dataset(dataset)
        if (
            not is_iterable and self.batch_size is not None and self.max_batch_cost is None
        ):  # by cost: one sample a call
            prefetch = async_prefetch(self.prefetch_factor, self.batch_size, item_concurrency) if is_async else None
            if not is_async and num_workers > 0 and not self.worker_processes and not self.defer_stragglers:
                prefetch = None if max_bytes_in_flight is not None else self.prefetch_factor  # items as the unit
            warn_if_unreachable(self.batch_size, num_workers, item_concurrency, prefetch_factor=prefetch, stacklevel=3)
        if self.return_indices and is_iterable:
            raise ValueError("return_indices=True needs a map-style dataset: an IterableDataset has no indices")
        if is_async and is_iterable:
            raise ValueError("an IterableDataset with async __getitem__ is not supported; use a map-style dataset")
        self._settle(kind_of(dataset, is_iterable=is_iterable, is_async=is_async), errors.skips)
        self._start_kept(errors, next_epoch=0)

    @property
    def multiprocessing_context(self) -> BaseContext | None:
        """torch's ``multiprocessing_context``: ``None`` or the start method's context (a name
        given is made one). With ``worker_processes`` it starts them (``None``: forkserver);
        on threads it has no effect, and setting it warns so. Checked as torch checks it, with
        torch's errors; with worker processes it cannot change after construction."""
        context: BaseContext | None = self.__dict__.get("_multiprocessing_context")
        return context

    @multiprocessing_context.setter
    def multiprocessing_context(self, value: str | BaseContext | None) -> None:
        context = check_context(value, self.num_workers, self.worker_processes)
        starts: BaseContext | None = None  # how worker processes start
        if self.worker_processes:
            if "_plan" in self.__dict__:
                if _start_method(context) != _start_method(self.multiprocessing_context):
                    raise ValueError(
                        "multiprocessing_context attribute should not be set after ThreadLoader is initialized "
                        "with worker_processes: its processes are started that way; build a new loader"
                    )
                return
            starts = resolve_context(context)
        elif context is not None:
            warnings.warn(
                f"multiprocessing_context={context.get_start_method()!r} has no effect on ThreadLoader's "
                "workers: they are threads of this process (it starts worker processes, with worker_processes=P)",
                UserWarning,
                stacklevel=4 if "_plan" in self.__dict__ else 5,
            )
        self.__dict__["_mp_context"] = starts
        self.__dict__["_multiprocessing_context"] = context

    def _settle(self, kind: Kind, skips: bool) -> None:
        """Check the settings that depend on the dataset's ``kind`` and make the plan from them
        (``skips``: ``on_error`` replaces a failed sample)."""
        check_settings(self, strategy_of(kind), skips=skips)
        self._plan = make_plan(self, kind=kind, skips=skips)

    @property
    def _strategy(self) -> KindStrategy:
        """The strategy of the dataset's kind (see :mod:`torch_threadloader.kinds`)."""
        return strategy_of(self._plan.kind)

    def __setattr__(self, name: str, value: object) -> None:
        # After construction, a setting the plan is made from rebuilds the plan (checked as at
        # construction; a refused value leaves the old one); the next iter() runs on it.
        plan = self.__dict__.get("_plan")
        if plan is None or (name not in PLAN_SOURCES and name not in FIXED_AFTER_INIT):
            super().__setattr__(name, value)
            return
        if name in FIXED_AFTER_INIT:
            raise ValueError(
                f"{name} attribute should not be set after ThreadLoader is initialized: build a new loader"
            )
        old = self.__dict__[name]
        super().__setattr__(name, checked_setting(self, name, value))
        try:
            self._settle(plan.kind, plan.skips)
        except BaseException:
            super().__setattr__(name, old)
            raise
        if name == "per_sample_rng" and self.per_sample_rng and not old:
            # Turned on between epochs: the next epoch draws for its own number, as a loader built
            # with it draws (the epochs it ran without are counted too: the error log counts every one).
            started = self._state.errors.epochs
            with self._state.kept.lock:
                self._state.next_epoch = max(self._state.next_epoch, started)

    def _start_kept(self, errors: ErrorLog, *, next_epoch: int) -> None:
        """What the loader carries from epoch to epoch (:class:`LoaderState`), new: no threads
        yet, the error log ``errors``, and ``next_epoch`` (``per_sample_rng``'s count)."""
        stats = (
            LoaderStats(
                max(self.num_workers, 1) if self.worker_processes else self.num_workers,
                self.item_concurrency,
                worker_processes=self.worker_processes,
            )
            if self.keep_stats
            else None
        )
        kept = Kept(self.dataset, torch.get_num_threads())
        self._state = LoaderState(kept, errors, stats, StallLog(), next_epoch=next_epoch)
        self._finalizer = weakref.finalize(self, _close_kept, kept)
        self._finalizer.atexit = False  # the threads' own exit hook stops them, within its bound

    def _inputs(self) -> EpochInputs:
        """The loader read once, for an epoch or a state: its plan, the objects a plan cannot
        hold, and what it carries from epoch to epoch."""
        return EpochInputs(
            plan=self._plan,
            dataset=self.dataset,
            sampler=self.sampler,
            batch_sampler=self.batch_sampler,
            generator=self.generator,
            collate_fn=self.collate_fn,
            sample_cost=self.sample_cost,
            worker_init_fn=self.worker_init_fn,
            on_error=self.on_error,
            mp_context=self.__dict__["_mp_context"],
            iterable_len=self._IterableDataset_len_called,
            state=self._state,
            owner=self,
        )

    def __len__(self) -> int:
        """torch's ``len()``: the batch sampler's batches; with ``max_batch_cost`` a
        ``TypeError``, as for a loader of unknown length (the number of batches depends on the
        samples' costs), so a trainer runs the epoch to its end instead of counting batches."""
        if self.__dict__.get("max_batch_cost") is not None:
            raise TypeError(
                "len() of a ThreadLoader with max_batch_cost is not known before the epoch: its batches are cut by "
                "the samples' costs"
            )
        return super().__len__()

    def check_worker_number_rationality(self) -> None:
        """No warning: worker threads waiting on I/O may well outnumber the CPUs."""

    def __iter__(self) -> Epoch:  # type: ignore[override]
        plan = self._plan
        if (plan.num_workers > 0 or plan.in_processes) and plan.prefetch <= 0:
            # torch's check, when torch makes it (its worker iterator's), with its error
            raise AssertionError("prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter")
        return Epoch(self._inputs())

    def close(self) -> None:
        """Stop open epochs and every thread the loader keeps (worker pool, item pool, event
        loop, awaiting an async dataset's ``aclose()``), within one bounded wait: a call still
        running after it is named in a warning and ends on its own. Idempotent; also runs on
        garbage collection. Iterating the loader again afterwards starts new threads."""
        _close_kept(self._state.kept)

    def __enter__(self) -> ThreadLoader[T_co]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self, *, gather: bool | None = None) -> dp.StateDict:
        """Where the loader is: resuming from it on a loader built with the same arguments
        (``load_state_dict``) gives exactly the batches of the epoch not yet delivered (every
        sample once; with ``in_order=True`` in the same order), and the epochs after it draw
        the same random numbers. Call it between batches, from any thread. Plain Python data
        (``torch.load(weights_only=True)`` loads it). In a process group of more than one rank
        it is a collective: every rank calls it and gets every rank's state (each restores
        its own); ``gather=False`` takes only this rank's, without a collective (for code that
        saves a state per rank itself). See ``docs/guide.md``, "Checkpoints"."""
        local = self._local_state()
        return gather_ranks(local, gather=gather)

    def load_state_dict(self, state_dict: dp.StateDict) -> None:
        """Make the next ``iter()`` resume from ``state_dict`` (from :meth:`state_dict` of a
        loader with the same arguments; ``num_workers``, ``item_concurrency``, ``in_order``,
        ``pin_memory`` and ``timeout`` may differ, except ``num_workers`` for an
        ``IterableDataset``, whose state is per worker). Raises ``ValueError`` naming
        what differs for a state from other arguments."""
        inputs, state = self._inputs(), self._state
        local = pick_rank(state_dict, inputs, loader_config(inputs, self._strategy))
        with state.kept.lock:
            state.pending = None
            state.record = None
        finished = bool(local.get("finished", True))
        restore_generators(inputs, local.get("generators"))
        if finished and local.get("rng") is not None and not local.get("eager"):
            # The generator as the finished epoch left it (torch's RandomSampler draws once
            # more when its iterator ends). An order drawn at iter() left it as it was saved.
            replay_epoch(inputs, local["rng"])
        if finished and local.get("sampler_state") is not None:
            stateful = stateful_sampler(inputs)
            if stateful is not None:
                stateful.load_state_dict(local["sampler_state"])
        if local.get("global_rng") is not None and draws_from_global(inputs, local.get("eager")):
            torch.set_rng_state(as_tensor_state(local["global_rng"]))
        with state.kept.lock:
            if self._plan.persistent and local.get("base_seed") is not None:
                state.kept.base_seed = int(local["base_seed"])
            if self.per_sample_rng and local.get("sample_epoch") is not None:
                state.next_epoch = int(local["sample_epoch"])
            # Kept until the next iter(), which resumes from a mid-epoch state; a state taken
            # before that is this one (a finished one included: loading it was all it does).
            state.pending = local
        self._strategy.restore(self.dataset, self._plan, local)

    def _local_state(self) -> dp.StateDict:
        inputs, kept = self._inputs(), self._state.kept
        with kept.lock:
            pending, record, base_seed = self._state.pending, self._state.record, kept.base_seed
        if record is None:
            if pending is not None:
                return dict(pending)
            state = {"config": loader_config(inputs, self._strategy), "finished": True}
            state.update(EpochRecord.generators_of(inputs))
            state.update(self._strategy.sampler_state(inputs))
            if self.persistent_workers and base_seed is not None:
                state["base_seed"] = base_seed
        else:
            state = record.state(inputs)
        state.update(self._strategy.own_state(self.dataset))
        if self.per_sample_rng and "sample_epoch" not in state:
            # The epoch number the next iter() after loading draws for: this one again, unless done.
            with kept.lock:
                epoch = self._state.next_epoch
            if record is not None and not state.get("finished", True) and record.sample_epoch is not None:
                epoch = record.sample_epoch
            state["sample_epoch"] = epoch
        return state

    @property
    def keep_stats(self) -> bool:
        """The ``stats`` argument: the loader keeps stats (``vars(loader)["stats"]``)."""
        return bool(self.__dict__.get("stats", False))

    @property
    def stats(self) -> Callable[[], dict[str, Any]]:
        """What the loader did, summed over its epochs. With ``stats=True``: per stage
        (``sampling``, ``fetch``, ``transform``, ``collate``, ``pin``, ``handover`` (the
        caller's wait in ``next()``), ``train`` (the caller's time between batches)) its
        count, errors, retries, busy seconds, share of that time on a CPU (where measured)
        and latency p50/p90/p99; the batches, the share found ready, the process's CPU time
        over the same wall time. Always: ``graph``, the counters of the most recent epoch's
        node graph (see ``datapipes.Node.stats``).

        The ``stats`` argument is kept in the instance's ``__dict__`` under its own name
        (``vars(loader)["stats"]``, where a framework rebuilding the loader reads its arguments)
        and as :attr:`keep_stats`; ``loader.stats`` is this method."""
        return self._stats_snapshot

    def _stats_snapshot(self) -> dict[str, Any]:
        state = self._state
        with state.kept.lock:
            graph, budget = state.last_graph, state.last_budget
        out: dict[str, Any] = state.stats.snapshot() if state.stats is not None else {"stages": {}}
        out["enabled"] = state.stats is not None
        out["skipped"] = state.errors.total
        if budget is not None:
            out["budget"] = {"limit": budget.limit, "peak": budget.peak, "waits": budget.waits}
        out["graph"] = graph.stats() if graph is not None else {}
        if self.max_batch_cost is not None:
            out["over_budget"] = state.over_budget.snapshot()
        return out

    def stalls(self) -> list[StallReport]:
        """The stall reports made so far (``stall_report_after``), newest last: the newest
        ``KEPT_REPORTS`` (32) over every epoch. Each is a :class:`StallReport`; ``str()``
        prints it as the warning does."""
        return self._state.stalls.reports()

    def errors(self) -> list[ErrorRecord]:
        """The samples skipped (``on_error``), oldest first: every one of the current epoch, and
        the newest ``skip.PAST_RECORDS_KEPT`` (10,000) of the epochs before (``stats()["skipped"]``
        counts them all). Each record: ``index``, ``stage`` (``fetch``,
        or the stage it was marked in), ``type`` and ``message`` of the exception,
        ``attempts``, ``batch`` (its position in the epoch's order) and
        ``epoch`` (counted from 1 by this loader). Records of an epoch resumed from a state
        are carried in it (a resumed run neither repeats nor loses them)."""
        return self._state.errors.records()

    def report(self) -> str:
        """What limits this loader and the change to make, in a few lines, from
        :meth:`stats` (``stats=True``): ``training-bound``, ``fetch-bound``, ``GIL-bound``,
        ``CPU-bound``, ``collate-bound``, ... and a table of the stages."""
        stats = self._state.stats
        if stats is None:
            return "no stats: build the loader with stats=True, iterate it, then call report()"
        snapshot = stats.snapshot()
        _, text = verdict(snapshot)
        lines = [text, "", f"{'stage':<10} {'count':>8} {'busy s':>9} {'p50 ms':>8} {'p99 ms':>8} {'cpu':>5}"]
        for name, st in snapshot["stages"].items():
            if not st["count"]:
                continue
            p50 = f"{st['p50_s'] * 1e3:.3f}" if st["p50_s"] is not None else "-"
            p99 = f"{st['p99_s'] * 1e3:.3f}" if st["p99_s"] is not None else "-"
            cpu = f"{st['cpu_share']:.0%}" if st["cpu_share"] is not None else "-"
            lines.append(f"{name:<10} {st['count']:>8} {st['busy_s']:>9.3f} {p50:>8} {p99:>8} {cpu:>5}")
        return "\n".join(lines)

    # -- copies: the settings, never the threads ---------------------------------------------
    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        for key in ("_state", "_finalizer", "_iterator"):
            state.pop(key, None)
        # per_sample_rng: a copy goes on counting from the original's epoch.
        state["_next_epoch"] = self._state.next_epoch
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        next_epoch = int(state.pop("_next_epoch", 0))
        self.__dict__.update(state)
        self.__dict__["_iterator"] = None
        errors = ErrorLog(self.on_error, self.max_errors)
        self._plan = make_plan(self, kind=self._plan.kind, skips=errors.skips)
        self._start_kept(errors, next_epoch=next_epoch)


def _start_method(context: BaseContext | None) -> str | None:
    return context.get_start_method() if context is not None else None


def _close_kept(kept: Kept) -> None:
    kept.close(DEFAULT_JOIN_TIMEOUT)
