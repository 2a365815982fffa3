"""ThreadLoader: torch's DataLoader, batch for batch, with threads for workers."""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

import datapipes as dp
from torch_threadloader.budget import BudgetTotals, ByteBudget
from torch_threadloader.concurrency import warn_if_unreachable
from torch_threadloader.fetch import Workers, is_async_dataset
from torch_threadloader.graph import (
    EpochSpec,
    Resources,
    StartedIndices,
    build_graph,
    pin_available,
    started_indices,
)
from torch_threadloader.pipeline_stats import LoaderStats, verdict
from torch_threadloader.plan import kind_of, make_plan
from torch_threadloader.processes import (
    check_process_affinity,
    check_process_nice,
    check_worker_processes,
    process_graph,
    resolve_context,
)
from torch_threadloader.resume import (
    NO_TAG,
    EpochRecord,
    as_tensor_state,
    drawn_at_iter,
    draws_from_global,
    find_prefetching_fetcher,
    gather_ranks,
    is_stateful,
    iterable_datasets_states,
    keep_sampler_epoch,
    loader_config,
    order_rngs,
    pick_rank,
    replay_epoch,
    replay_order,
    restore_generators,
    sampler_state_of,
    snapshot,
    stateful_sampler,
    tag_of,
)
from torch_threadloader.skip import ErrorPolicy
from torch_threadloader.worker_info import check_worker_copy, install_torch_hook, resolve_worker_method

__all__ = ["LoaderTimeoutError", "ThreadLoader"]

T_co = TypeVar("T_co", covariant=True)

#: Seconds ``close()`` waits, in all, for calls in progress before it warns and returns
#: (read when ``close()`` runs).
DEFAULT_JOIN_TIMEOUT = dp.DEFAULT_JOIN_TIMEOUT
#: Seconds a Ctrl-C in ``next()`` waits for calls in progress.
INTERRUPT_TIMEOUT = 0.5

install_torch_hook()


class LoaderTimeoutError(RuntimeError, TimeoutError):
    """No batch within the loader's ``timeout``: a ``RuntimeError``, as torch raises, and a
    ``TimeoutError``. ``batch`` is its position in the epoch and ``indices`` its indices
    (``None`` for an ``IterableDataset``), ``timeout`` the seconds waited. The batch keeps its
    place: the next ``next()`` waits for it again, so the batches after it are never reordered.
    The same in every mode (threads, async datasets, node graphs, worker processes); it
    survives ``pickle`` and ``copy`` (sent from a child process, it arrives as itself)."""

    def __init__(self, timeout: float, batch: int, indices: Any) -> None:
        self.timeout = timeout
        self.batch = batch
        self.indices = indices
        where = f"batch {batch}" if indices is None else f"batch {batch} (indices {indices!r})"
        super().__init__(f"DataLoader timed out after {timeout} seconds waiting for {where}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.timeout, self.batch, self.indices), self.__dict__


class ThreadLoader(DataLoader[T_co]):
    """A :class:`torch.utils.data.DataLoader` whose workers are threads of this process.

    Takes DataLoader's whole signature, with the same defaults and the same errors for
    invalid combinations, and yields the same batches in the same order for the same
    arguments and ``generator`` seed (any order when ``in_order=False``). Worker semantics are
    torch's: batch ``i`` is loaded by worker ``i % num_workers``; each worker has its own
    shallow copy of the dataset, its ``WorkerInfo`` (``get_worker_info()`` answers per thread)
    and one ``worker_init_fn`` call; ``persistent_workers=False`` gives each epoch its own
    threads (started at ``iter()``, gone when it ends) and a new base seed, ``True`` keeps
    them, runs ``worker_init_fn`` once and draws the base seed once. The sampler is drawn
    from in the caller's thread, when torch draws from it. Extra arguments:

    * ``item_concurrency``: how many items of one batch are fetched at once (``dataset[i]``
      calls on a thread pool; a dataset with ``__getitems__`` fetches its batch itself).
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
    * ``worker_copy``: each worker's copy of the dataset, ``"shallow"`` (``copy.copy``, the
      default) or ``"deep"`` (``copy.deepcopy``: its objects are the worker's own, for
      free-threaded Python). A ``worker_init_fn`` holding the dataset (a bound method, a
      partial) acts on the worker's copy, as torch's pickling gives it.
    * ``per_sample_rng``: run each ``dataset[i]`` (map-style, sync, in threads) under draws of
      its own, ``sample_generator(base_seed, epoch, i)``: torch's random functions called
      without ``generator=`` on CPU and ``torch.random.thread_safe_generator()`` draw from it,
      so the same ``generator`` seed gives the same batches for any ``num_workers`` and
      ``item_concurrency`` (torch's global generator is not touched; Python's ``random`` and
      NumPy's global generators are not reached). See ``docs/guide.md``.

    Async datasets (``async def __getitem__`` or ``__getitems__``) run on an event-loop
    thread, batch ``i`` as worker ``i % num_workers``, up to ``max(num_workers, 1) *
    item_concurrency`` coroutines in flight; the dataset's (each worker copy's) ``aclose()``
    is awaited when the loop closes. A :mod:`datapipes` node graph as the dataset runs once
    per epoch (it owns its concurrency); with ``num_workers > 0`` one thread runs it ahead.
    ``multiprocessing_context`` is refused without ``worker_processes``.

    Bounds: at most ``max(num_workers, 1) * prefetch_factor`` batches are loading or waiting.
    Errors: an exception from the dataset, ``collate_fn`` or ``worker_init_fn`` is raised by
    ``next()`` for its batch as the same object; the following ``next()`` goes on.
    ``timeout`` raises :class:`LoaderTimeoutError` (a ``RuntimeError`` and a
    ``TimeoutError``) naming the batch and its indices. Close: ``break``, ``del``, garbage
    collection, exhaustion or ``close()`` of an epoch's iterator stops its work;
    :meth:`close` stops everything the loader runs, within one bounded wait. The loader
    pickles and deep-copies as its settings (no threads are copied).
    """

    def __init__(
        self,
        dataset: Dataset[T_co],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: torch.utils.data.Sampler[Any] | Iterable[Any] | None = None,
        batch_sampler: torch.utils.data.Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        item_concurrency: int = 1,
        return_indices: bool = False,
        stats: bool = False,
        on_error: str | Callable[[Any, BaseException], bool] = "raise",
        max_errors: int | float | None = None,
        max_bytes_in_flight: int | None = None,
        worker_processes: int = 0,
        process_nice: int = 0,
        process_affinity: Iterable[int] | Iterable[Iterable[int]] | None = None,
        worker_method: str | None = None,
        worker_copy: str = "shallow",
        per_sample_rng: bool = False,
    ) -> None:
        # -- worker processes (docs/processes.md) --
        self.worker_method = worker_method
        num_workers, worker_processes = resolve_worker_method(worker_method, num_workers, worker_processes)
        self.worker_processes = check_worker_processes(worker_processes)
        self.process_nice = check_process_nice(process_nice, self.worker_processes)
        self.process_affinity = check_process_affinity(process_affinity, self.worker_processes)
        if multiprocessing_context is not None and not self.worker_processes:
            raise ValueError(
                "multiprocessing_context does not apply to ThreadLoader without worker_processes: its workers "
                "are threads of this process, not processes; leave it None, or set worker_processes=P to run "
                "the loader's threads in P worker processes started this way"
            )
        self._mp_context = resolve_context(multiprocessing_context) if self.worker_processes else None
        # -- end worker processes --
        dp_check_positive("item_concurrency", item_concurrency)
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
        self.item_concurrency = item_concurrency
        self.worker_copy = check_worker_copy(worker_copy)
        if not isinstance(per_sample_rng, bool):
            raise TypeError(f"per_sample_rng must be a bool, got {per_sample_rng!r}")
        self.per_sample_rng = per_sample_rng
        self.return_indices = bool(return_indices)
        self.keep_stats = bool(stats)
        self.on_error = on_error
        self.max_errors = max_errors
        self._errors = ErrorPolicy(on_error, max_errors)
        if max_bytes_in_flight is not None:
            ByteBudget(max_bytes_in_flight)  # refuses a bad value now
        self.max_bytes_in_flight = max_bytes_in_flight
        self._is_iterable = isinstance(dataset, IterableDataset)
        self._is_async = is_async_dataset(dataset)
        if not self._is_iterable and self.batch_size is not None:
            warn_if_unreachable(self.batch_size, num_workers, item_concurrency, stacklevel=3)
        if self.return_indices and self._is_iterable:
            raise ValueError("return_indices=True needs a map-style dataset: an IterableDataset has no indices")
        if self._is_async and self._is_iterable:
            raise ValueError("an IterableDataset with async __getitem__ is not supported; use a map-style dataset")
        self._kind = kind_of(dataset, is_iterable=self._is_iterable, is_async=self._is_async)
        if item_concurrency > 1 and self._kind in ("iterable", "node"):
            raise ValueError(
                f"item_concurrency={item_concurrency} does not apply to "
                + (
                    "an IterableDataset: its items come from one iterator per worker, read in turn; "
                    "use num_workers for more at once"
                    if self._kind == "iterable"
                    else "a datapipes graph as the dataset: the graph owns its concurrency (its map's "
                    "num_threads or max_concurrency)"
                )
                + "; leave item_concurrency=1"
            )
        if per_sample_rng and (self._kind != "map" or self.worker_processes):
            raise ValueError(
                "per_sample_rng=True applies to map-style datasets with a sync __getitem__ loaded by threads (each "
                "dataset[i] call runs under the sample's generator on its thread); this dataset is "
                f"{self._kind!r}{' with worker_processes' if self.worker_processes else ''}: leave per_sample_rng=False"
            )
        if self.worker_processes and self._kind == "node":
            raise ValueError(
                "worker_processes does not apply to a datapipes graph as the dataset: a graph runs its own "
                "threads once per epoch; leave worker_processes=0"
            )
        if max_bytes_in_flight is not None and (self._kind != "map" or self.batch_sampler is None):
            raise ValueError(
                "max_bytes_in_flight applies to map-style datasets with a sync __getitem__ (their worker threads "
                f"charge each item as they fetch it), loaded in batches; this dataset is {self._kind!r}"
                f"{'' if self.batch_sampler is not None else ', without batches (batch_size=None)'}"
            )
        if self._errors.skips and (self._kind not in ("map", "async") or self.batch_sampler is None):
            raise ValueError(
                f"on_error={on_error!r} needs a map-style dataset loaded in batches: a skipped sample is replaced "
                "by another of its batch (an IterableDataset's items have no index to skip, and a lone sample has "
                "nothing to take its place)"
            )
        self._plan = make_plan(self, kind=self._kind, skips=self._errors.skips)
        self._start_kept()

    def _start_kept(self) -> None:
        self._stats = (
            LoaderStats(
                max(self.num_workers, 1) if self.worker_processes else self.num_workers,
                self.item_concurrency,
                worker_processes=self.worker_processes,
            )
            if self.keep_stats
            else None
        )
        self._kept = _Kept(self.dataset, torch.get_num_threads())
        self._finalizer = weakref.finalize(self, _close_kept, self._kept)
        self._finalizer.atexit = False  # the threads' own exit hook stops them, within its bound
        self._last_graph: dp.Node[Any] | None = None
        self._pending: dict[str, Any] | None = None  # a loaded state the next iter() resumes from
        # per_sample_rng: the epoch number the next iter() draws for (a copy goes on from the original's).
        self._next_epoch: int = self.__dict__.get("_next_epoch", 0)
        self._record: EpochRecord | None = None  # what the most recent epoch delivered
        # The most recent epoch's (max_bytes_in_flight); with worker processes, their totals.
        self._last_budget: ByteBudget | BudgetTotals | None = None

    def check_worker_number_rationality(self) -> None:
        """No warning: worker threads waiting on I/O may well outnumber the CPUs."""

    def __iter__(self) -> _ThreadLoaderIter:  # type: ignore[override]
        if (
            self._kind == "map"
            and self.num_workers == 0
            and not self.worker_processes
            and self._stats is None
            and not self._errors.skips
        ):
            # Made as the lean class it will be (an instance whose class is swapped later
            # reads its attributes slower; see _ThreadLoaderIter.__init__'s end).
            return _MappedEpoch(self)
        return _ThreadLoaderIter(self)

    def close(self) -> None:
        """Stop open epochs and every thread the loader keeps (worker pool, item pool, event
        loop, awaiting an async dataset's ``aclose()``), within one bounded wait: a call still
        running after it is named in a warning and ends on its own. Idempotent; also runs on
        garbage collection. Iterating the loader again afterwards starts new threads."""
        _close_kept(self._kept)

    def __enter__(self) -> ThreadLoader[T_co]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self, *, gather: bool | None = None) -> dict[str, Any]:
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

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Make the next ``iter()`` resume from ``state_dict`` (from :meth:`state_dict` of a
        loader with the same arguments; ``num_workers``, ``item_concurrency``, ``in_order``,
        ``pin_memory`` and ``timeout`` may differ, except ``num_workers`` for an
        ``IterableDataset``, whose state is per worker). Raises ``ValueError`` naming
        what differs for a state from other arguments."""
        local = pick_rank(state_dict, self)
        with self._kept.lock:
            self._pending = None
            self._record = None
        finished = bool(local.get("finished", True))
        restore_generators(self, local.get("generators"))
        if finished and local.get("rng") is not None and not local.get("eager"):
            # The generator as the finished epoch left it (torch's RandomSampler draws once
            # more when its iterator ends). An order drawn at iter() left it as it was saved.
            replay_epoch(self, local["rng"])
        if finished and local.get("sampler_state") is not None:
            stateful = stateful_sampler(self)
            if stateful is not None:
                stateful.load_state_dict(local["sampler_state"])
        if local.get("global_rng") is not None and draws_from_global(self, local.get("eager")):
            torch.set_rng_state(as_tensor_state(local["global_rng"]))
        if self.persistent_workers and self.num_workers > 0 and local.get("base_seed") is not None:
            with self._kept.lock:
                self._kept.base_seed = int(local["base_seed"])
        if self.per_sample_rng and local.get("sample_epoch") is not None:
            with self._kept.lock:
                self._next_epoch = int(local["sample_epoch"])
        # Kept until the next iter(), which resumes from a mid-epoch state; a state taken
        # before that is this one (a finished one included: loading it was all it does).
        with self._kept.lock:
            self._pending = local
        if finished and self._kind == "node" and local.get("graph"):
            _run_out(cast(dp.Node[Any], self.dataset), local["graph"])
        own = local.get("datasets") if finished and self._kind == "iterable" and self.num_workers == 0 else None
        if own and own[0] is not None and is_stateful(self.dataset):
            self.dataset.load_state_dict(own[0])  # type: ignore[attr-defined]  # the copy of no workers: itself
        if self._kind in ("map", "async") and is_stateful(self.dataset) and local.get("dataset") is not None:
            self.dataset.load_state_dict(local["dataset"])  # type: ignore[attr-defined]

    def _local_state(self) -> dict[str, Any]:
        with self._kept.lock:
            pending, record = self._pending, self._record
        if record is None:
            if pending is not None:
                return dict(pending)
            state = {"config": loader_config(self), "finished": True}
            state.update(EpochRecord.generators_of(self))
            state.update(sampler_state_of(self))
            if self.persistent_workers and self._kept.base_seed is not None:
                state["base_seed"] = self._kept.base_seed
        else:
            state = record.state(self)
        if self._kind in ("map", "async") and is_stateful(self.dataset):
            state["dataset"] = self.dataset.state_dict()  # type: ignore[attr-defined]
        if self.per_sample_rng and "sample_epoch" not in state:
            # The epoch number the next iter() after loading draws for: this one again, unless done.
            with self._kept.lock:
                epoch = self._next_epoch
            if record is not None and not state.get("finished", True):
                epoch = getattr(record, "sample_epoch", epoch)
            state["sample_epoch"] = epoch
        return state

    def stats(self) -> dict[str, Any]:
        """What the loader did, summed over its epochs. With ``stats=True``: per stage
        (``sampling``, ``fetch``, ``transform``, ``collate``, ``pin``, ``handover`` (the
        caller's wait in ``next()``), ``train`` (the caller's time between batches)) its
        count, errors, retries, busy seconds, share of that time on a CPU (where measured)
        and latency p50/p90/p99; the batches, the share found ready, the process's CPU time
        over the same wall time. Always: ``graph``, the counters of the most recent epoch's
        node graph (see ``datapipes.Node.stats``)."""
        graph = self._last_graph
        out: dict[str, Any] = self._stats.snapshot() if self._stats is not None else {"stages": {}}
        out["enabled"] = self._stats is not None
        out["skipped"] = self._errors.total
        budget = self._last_budget
        if budget is not None:
            out["budget"] = {"limit": budget.limit, "peak": budget.peak, "waits": budget.waits}
        out["graph"] = graph.stats() if graph is not None else {}
        return out

    def errors(self) -> list[dict[str, Any]]:
        """The samples skipped (``on_error``), oldest first: every one of the current epoch, and
        the newest ``skip.PAST_RECORDS_KEPT`` (10,000) of the epochs before (``stats()["skipped"]``
        counts them all). Each record: ``index``, ``stage`` (``fetch``,
        or the stage it was marked in), ``type`` and ``message`` of the exception,
        ``attempts``, ``batch`` (its position in the epoch's order) and
        ``epoch`` (counted from 1 by this loader). Records of an epoch resumed from a state
        are carried in it (a resumed run neither repeats nor loses them)."""
        return self._errors.records()

    def report(self) -> str:
        """What limits this loader and the change to make, in a few lines, from
        :meth:`stats` (``stats=True``): ``training-bound``, ``fetch-bound``, ``GIL-bound``,
        ``CPU-bound``, ``collate-bound``, ... and a table of the stages."""
        if self._stats is None:
            return "no stats: build the loader with stats=True, iterate it, then call report()"
        snapshot = self._stats.snapshot()
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
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in (
            "_kept",
            "_finalizer",
            "_last_graph",
            "_iterator",
            "_record",
            "_pending",
            "_stats",
            "_last_budget",
            "_errors",
        ):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__["_iterator"] = None
        self._errors = ErrorPolicy(self.on_error, self.max_errors)
        self._plan = make_plan(self, kind=self._kind, skips=self._errors.skips)
        self._start_kept()


def _used_call(loader: ThreadLoader[Any], stateful: Any) -> tuple[Any, StartedIndices, dict[str, Any] | None]:
    """The ``iter(sampler)`` call whose iterator the epoch uses (:func:`started_indices`), with
    what a resume needs to make it again: a Stateful sampler's own state before it (a copy),
    and the generators' states before it when it drew (see :func:`drawn_at_iter`)."""
    state = snapshot(stateful.state_dict(), stateful) if stateful is not None else None
    before = order_rngs(loader)
    indices = started_indices(loader)
    return state, indices, drawn_at_iter(before, order_rngs(loader))


def _run_out(graph: dp.Node[Any], state: dict[str, Any]) -> None:
    """Resume ``graph`` from the state after its epoch's last item, and run that epoch out
    (nothing is left of it): its generators are then where the uninterrupted run's were."""
    graph.load_state_dict(state)
    with graph.open() as it:
        for _ in it:
            raise RuntimeError(
                f"{graph!r} yielded an item after the state that says its epoch ended: the graph is not "
                "the one the state was taken from"
            )


def _close_kept(kept: _Kept) -> None:
    kept.close(DEFAULT_JOIN_TIMEOUT)


def dp_check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1), got {value!r}")


class _Kept:
    """What a loader keeps across epochs: with persistent workers their pool, workers and base
    seed; an event loop for async datasets without workers; the open epochs. Holds no reference
    to the loader, so the loader's finalizer can close it."""

    def __init__(self, dataset: Any, intraop_default: int) -> None:
        self.resources = Resources(dataset, intraop_default)
        self.lock = threading.Lock()
        self.epochs: weakref.WeakSet[_ThreadLoaderIter] = weakref.WeakSet()
        self.base_seed: int | None = None
        self.pin_warned = False
        self.processes: Any = None  # worker_processes > 0: the loader's WorkerProcesses, made at the first iter()

    def close(self, timeout: float | None, *, interrupted: bool = False) -> None:
        with self.lock:
            epochs = list(self.epochs)
            self.epochs.clear()
            self.base_seed = None
        deadline = dp.Deadline(timeout)
        for epoch in epochs:  # first stop the work that runs on the kept threads
            epoch._close(deadline.remaining(), warn=not interrupted)
        self.resources.close(deadline.remaining(), warn=not interrupted)
        self.resources.workers = None
        with self.lock:
            processes, self.processes = self.processes, None
        if processes is not None:
            processes.close(deadline.remaining(), warn=not interrupted)


class _ThreadLoaderIter(Iterator[Any]):
    """One epoch of a ThreadLoader: the node graph ``graph.build_graph`` makes. Closing it
    (exhaustion, ``close()``, garbage collection) stops the epoch's work and, with
    ``persistent_workers=False``, its threads."""

    def __init__(self, loader: ThreadLoader[Any]) -> None:
        if loader.timeout and loader.num_workers == 0 and not loader.worker_processes:
            # torch accepts this at construction and refuses it here, with these words.
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        kept = loader._kept
        if kept.resources.pid != os.getpid():
            kept.resources.forget_after_fork()
            with kept.lock:
                kept.epochs.clear()
        self._kept = kept
        # The epoch keeps its loader alive: collecting the loader closes its open epochs.
        self._loader = loader
        self._num_workers = loader.num_workers
        self._index_sampler = loader._index_sampler
        self._len_called = loader._IterableDataset_len_called
        self._dataset = loader.dataset
        self._timeout = float(loader.timeout)
        self._yielded = 0
        self._closed = False
        self._pid = os.getpid()
        # Closed by a thread other than the one that made the epoch (its consumer): a next()
        # that then finds the graph ended raises EpochClosedError, not StopIteration.
        self._consumer = threading.get_ident()
        self._closed_elsewhere = False
        self._stats = loader._stats
        self._returned = 0.0  # when next() last returned a batch (stats)
        persistent = loader.persistent_workers and loader.num_workers > 0
        uses_sampler = loader._kind in ("map", "async")
        with kept.lock:
            resume, loader._pending = loader._pending, None
        between: dict[str, Any] | None = None  # a state loaded between epochs
        if resume is not None and resume.get("finished", True):
            between, resume = resume, None  # loading it did all it does, but for persistent copies
        # torch's order of draws, for a sampler whose __iter__ draws at once: its iterator
        # base class calls iter(sampler), then draws the base seed (with persistent workers
        # only at the loader's first iter()); with workers, its _reset() then calls
        # iter(sampler) again and uses that one, dropping the first. The state of the call
        # the epoch uses is recorded: a Stateful sampler's own, and the generators' when that
        # call drew the order (else the order is drawn at the first next(), recorded by the
        # graph's Sampler). A resumed epoch makes only that call, from that state, and draws
        # nothing else: its base seed comes from the state, and load_state_dict() put the
        # generators (torch's global one included) where they were when it was taken.
        stateful = stateful_sampler(loader) if uses_sampler else None
        with kept.lock:
            first_draw = not persistent or kept.base_seed is None
        used_first = loader.num_workers == 0  # torch uses its first iter(sampler) without workers
        indices: Any = None
        eager: dict[str, Any] | None = None
        sampler_state: Any = None
        if uses_sampler and resume is not None:
            keep_sampler_epoch(loader, resume.get("order"))
            sampler_state, eager = resume.get("sampler_state"), resume.get("eager")
            if stateful is not None and sampler_state is not None:
                stateful.load_state_dict(sampler_state)
            indices = replay_order(loader, eager, started_indices)
        elif uses_sampler and first_draw:
            if used_first:
                sampler_state, indices, eager = _used_call(loader, stateful)
            else:
                started_indices(loader)
        if resume is not None:
            base_seed = int(resume["base_seed"])
            drew_base_seed = bool(resume.get("drew_base_seed"))
            if persistent:
                with kept.lock:
                    kept.base_seed = base_seed
            restore_generators(loader, {"loader": resume.get("loader_rng")})
        elif persistent:
            with kept.lock:
                if kept.base_seed is None:
                    kept.base_seed = _draw_seed(loader.generator)
                base_seed = kept.base_seed
            drew_base_seed = first_draw
        else:
            base_seed = _draw_seed(loader.generator)
            drew_base_seed = True
        loader_rng = loader.generator.get_state() if loader.generator is not None else None
        if uses_sampler and indices is None:
            sampler_state, indices, eager = _used_call(loader, stateful)
        batches = resume.get("batches") if resume is not None else None
        if batches is not None:  # the rest of an epoch taken with another world size, dealt out
            indices = StartedIndices(batches, iter(batches))
        pin = loader.pin_memory and _pin_or_warn(kept)
        n = loader.num_workers
        self._pool: dp.ThreadPool | None = None
        self._owned: Resources | None = None
        workers: Workers | None
        if loader.worker_processes:  # the workers are in the worker processes
            resources, workers = kept.resources, None
        elif persistent:
            resources = kept.resources
            with resources.lock:
                if resources.workers is not None and resources.workers.base_seed != base_seed:
                    # A loaded state's base seed: its workers, made (and initialised) anew as a
                    # new loader's would be, not the ones of the epochs this loader ran before.
                    resources.workers = None
                if resources.workers is None:
                    resources.workers = _workers(loader, resources, base_seed)
                workers = resources.workers
                free, resources.pool_busy = not resources.pool_busy, True
            if free:  # a second live epoch of the loader runs on threads of its own
                self._pool = resources.pool(n)
        else:
            # The epoch owns its threads; an async dataset without workers keeps the loader's loop.
            use_kept = n == 0 and loader._kind == "async"
            resources = kept.resources if use_kept else Resources(loader.dataset, kept.resources.intraop_default)
            if not use_kept:
                self._owned = resources
            workers = _workers(loader, resources, base_seed) if n > 0 else None
        if loader._kind == "async" and not any(d is loader.dataset for d in resources.async_datasets):
            resources.async_datasets.append(loader.dataset)
        try:
            epoch_samples: int | None = len(loader.sampler) if uses_sampler else None  # type: ignore[arg-type]
        except TypeError:
            epoch_samples = None
        loader._errors.new_epoch(epoch_samples, resume.get("errors", ()) if resume is not None else ())
        # An IterableDataset's copies that live on (no workers, persistent workers): their own
        # states as this epoch starts; from a state loaded between epochs, loaded into them.
        start_states = between.get("datasets") if between is not None and loader.num_workers > 0 else None
        iterable_start = (
            start_states if start_states is not None else iterable_datasets_states(loader) if resume is None else None
        )
        record = EpochRecord(
            loader,
            resume,
            base_seed=base_seed,
            drew_base_seed=drew_base_seed,
            loader_rng=loader_rng,
            sampler_state=sampler_state if stateful is not None else None,
            fetcher=find_prefetching_fetcher(),
            total=len(batches) if batches is not None else None,
            eager=eager if batches is None else None,
            indices=indices,
            iterable_start=iterable_start,
        )
        self._record = record
        self._tagged = record.tagged
        self._budget = (
            ByteBudget(loader.max_bytes_in_flight)
            if loader.max_bytes_in_flight is not None and loader.num_workers > 0 and not loader.worker_processes
            else None
        )
        if loader.max_bytes_in_flight is not None and loader.worker_processes:  # charged in the processes
            loader._last_budget = BudgetTotals(loader.max_bytes_in_flight, loader.worker_processes)
        if self._budget is not None:
            self._budget.needs(record.ledger.frontier)  # type: ignore[union-attr]
            loader._last_budget = self._budget
        spec = EpochSpec(loader, resources, workers, pin, indices, record.resume_part(), self._budget)
        spec.start_states = start_states
        if loader.per_sample_rng:
            spec.sample_rng = (base_seed, _sample_epoch(loader, record))
        if resume is None:
            spec.graph_opened = record.graph_opened
        if loader.worker_processes:
            graph = process_graph(spec, loader._kind, base_seed)
        else:
            graph = build_graph(spec, loader._kind, self._pool)
        loader._last_graph = graph
        with kept.lock:
            loader._record = record
        with kept.lock:
            kept.epochs.add(self)
        try:
            # The epoch owns the graph's iterator and closes it (also from __del__).
            self._it: dp.NodeIterator[Any] = graph.open()
        except BaseException:
            self._close(INTERRUPT_TIMEOUT, warn=False)
            raise
        if self._stats is not None:
            # From here: the epoch's wall time leaves out starting its threads or processes
            # (worker processes count their CPU time from when they are up, too).
            self._stats.epoch_started()
        record.attach(self._it)
        self._persistent = persistent
        lean = not self._tagged and self._stats is None and self._len_called is None and self._budget is None
        if isinstance(self, _MappedEpoch):
            if lean and isinstance(self._it, dp.MapperIterator):
                self._mapper = self._it
            else:  # not what ThreadLoader.__iter__ expected: the general __next__
                self.__class__ = _ThreadLoaderIter  # type: ignore[assignment]
        elif lean:
            self.__class__ = _PlainEpoch  # nothing to do after each batch: the lean __next__

    def __iter__(self) -> _ThreadLoaderIter:
        return self

    def _ran_out(self) -> None:
        """The graph ended: the epoch is complete (unless it was closed first) and closes.
        Closed by another thread meanwhile (a sync item ran on in the caller's thread), it is
        :class:`~datapipes.EpochClosedError`: the epoch did not end."""
        if self._closed_elsewhere:  # said once: a next() after it ends the epoch
            self._closed_elsewhere = False
            raise dp.EpochClosedError("the epoch was closed by another thread while next() ran") from None
        self._record.finish()
        self.close()

    def _timed_out(self, exc: dp.NodeTimeoutError) -> LoaderTimeoutError:
        """torch's timeout error for the batch the graph waited for."""
        position, indices = exc.seq, exc.item
        if self._tagged and isinstance(indices, tuple):  # (position, indices) of a map-style batch
            position, indices = indices
        return LoaderTimeoutError(self._timeout, position, indices)

    def _interrupted(self) -> None:
        # Ctrl-C leaves no thread: the epoch and the loader's kept threads stop now (a call
        # in progress ends on its own); the next epoch starts new ones.
        self._kept.close(INTERRUPT_TIMEOUT, interrupted=True)
        self._close(INTERRUPT_TIMEOUT, warn=False)

    def __next__(self) -> Any:
        it = self._it
        stats = self._stats
        entered = time.perf_counter() if stats is not None else 0.0
        try:
            batch = next(it)
        except StopIteration:
            self._ran_out()
            raise
        except dp.EpochClosedError:
            self._closed_elsewhere = False  # said by the graph: a next() after it ends the epoch
            raise
        except dp.NodeTimeoutError as exc:
            error = self._timed_out(exc)
            del self, it, exc  # see below
            raise error from None
        except KeyboardInterrupt:
            self._interrupted()
            raise
        except BaseException as exc:
            tag = tag_of(exc)
            if tag is not NO_TAG:  # the failed batch is delivered (as an error), as torch goes on
                self._record.add(tag)
                if self._budget is not None:
                    self._budget.taken(tag, self._record.ledger.frontier)  # type: ignore[union-attr]
            # An exception the caller keeps holds this frame: it must not keep the epoch
            # (and its threads) alive once the caller drops the iterator.
            del self, it, exc
            raise
        if self._tagged:
            tag, batch = batch
            self._record.add(tag)
            if self._budget is not None:
                self._budget.taken(tag, self._record.ledger.frontier)  # type: ignore[union-attr]
        if stats is not None:
            now = time.perf_counter()
            stats.handed(now - entered, entered - self._returned if self._returned else None)
            self._returned = now
        if self._len_called is not None:
            self._yielded += 1
            if self._yielded > self._len_called:
                self._warn_length()
        return batch

    def _warn_length(self) -> None:
        # torch's words (its _BaseDataLoaderIter.__next__), so filters written for them match.
        message = (
            f"Length of IterableDataset {self._dataset} was reported to be {self._len_called}"
            f"(when accessing len(dataloader)), but {self._yielded} samples have been fetched. "
        )
        if self._num_workers > 0:
            message += (
                "For multiprocessing data-loading, this could be caused by not properly configuring the "
                "IterableDataset replica at each worker. Please see "
                "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
            )
        warnings.warn(message, stacklevel=3)

    def __len__(self) -> int:
        return len(self._index_sampler)

    def close(self) -> None:
        """Stop this epoch's work (and, unless workers are persistent, its threads)."""
        self._close(DEFAULT_JOIN_TIMEOUT, warn=True)

    def _close(self, timeout: float | None, *, warn: bool) -> None:
        if getattr(self, "_pid", os.getpid()) != os.getpid():
            # A forked child: the epoch's threads, loop and processes are the parent's, and a
            # lock may have been held at the fork. Forget it; touch nothing of the parent's.
            self._closed = True
            return
        with self._kept.lock:
            if self._closed:
                return
            self._closed = True
            self._kept.epochs.discard(self)
            self._closed_elsewhere = threading.get_ident() != getattr(self, "_consumer", None)
        stats = getattr(self, "_stats", None)
        if stats is not None:
            stats.epoch_ended()
        budget = getattr(self, "_budget", None)
        if budget is not None:
            budget.close()  # wakes workers waiting for room, before they are stopped
        deadline = dp.Deadline(timeout)
        it = getattr(self, "_it", None)
        record = getattr(self, "_record", None)
        if record is not None and it is not None:
            record.freeze()
        stopped = False
        try:
            stopped = it is None or it.shutdown(deadline.remaining(), warn=warn)
        finally:
            if self._pool is not None:
                # A loop still in a call would hold one of the kept pool's threads: the next
                # epoch gets a new pool instead of queueing behind it.
                self._kept.resources.release_pool(self._pool, reusable=stopped)
            owned = self._owned
            if owned is not None:
                owned.close(deadline.remaining(), warn=warn)

    def __del__(self) -> None:
        # Dropping the epoch stops it; never wait long here (gc may run on any thread).
        try:
            self._close(INTERRUPT_TIMEOUT, warn=False)
        except Exception:
            pass


class _PlainEpoch(_ThreadLoaderIter):
    """An epoch with nothing to record per batch (no positions, stats, budget or length
    warning): ``__next__`` is ``next()`` of its graph, with the same end, Ctrl-C and error
    paths."""

    def __next__(self) -> Any:
        it = self._it
        try:
            return next(it)
        except StopIteration:
            self._ran_out()
            raise
        except KeyboardInterrupt:
            self._interrupted()
            raise
        except dp.EpochClosedError:
            self._closed_elsewhere = False  # said by the graph: a next() after it ends the epoch
            raise
        except dp.NodeTimeoutError as exc:
            error = self._timed_out(exc)
            del self, it, exc
            raise error from None
        except BaseException:
            del self, it  # a kept exception must not keep the epoch alive (see the base class)
            raise


class _MappedEpoch(_ThreadLoaderIter):
    """A :class:`_PlainEpoch` whose graph is a ``Mapper`` (a map-style dataset without
    workers or stats): ``__next__`` pulls the mapper's ``map()`` itself
    (``MapperIterator.raw()``), one Python call per batch less, and counts for it. Made as
    this class by ``ThreadLoader.__iter__``."""

    _mapper: dp.MapperIterator[Any]
    _mapped: Iterator[Any] | None = None

    def __next__(self) -> Any:
        mapped = self._mapped
        if mapped is None:
            mapped = self._mapped = self._mapper.raw()
        try:
            value = next(mapped)
        except StopIteration:
            self._ran_out()
            raise
        except KeyboardInterrupt:
            self._interrupted()
            raise
        except BaseException as exc:
            self._mapper.failed(exc)
            del self, mapped, exc  # a kept exception must not keep the epoch alive (see the base class)
            raise
        self._mapper.pulled += 1
        return value

    def _close(self, timeout: float | None, *, warn: bool) -> None:
        self._mapped = iter(())  # a next() after close() ends, as the graph's would
        super()._close(timeout, warn=warn)


def _sample_epoch(loader: ThreadLoader[Any], record: EpochRecord) -> int:
    """The epoch number this epoch's items draw for (``per_sample_rng``): the loader counts its
    epochs from 0; ``load_state_dict()`` sets the count to the state's epoch."""
    with loader._kept.lock:
        epoch = loader._next_epoch
        loader._next_epoch = epoch + 1
    record.sample_epoch = epoch  # type: ignore[attr-defined]
    return epoch


def _workers(loader: ThreadLoader[Any], resources: Resources, base_seed: int) -> Workers:
    """The workers of an epoch (or of persistent workers) of ``loader``; an async dataset's
    copies have their ``aclose()`` awaited when ``resources``' loop closes."""
    on_copy = resources.async_datasets.append if loader._kind == "async" else None
    return Workers(
        loader.dataset,
        loader.num_workers,
        base_seed,
        loader.worker_init_fn,
        worker_copy=loader.worker_copy,
        on_copy=on_copy,
    )


def _draw_seed(generator: torch.Generator | None) -> int:
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def _pin_or_warn(kept: _Kept) -> bool:
    if pin_available():
        return True
    with kept.lock:
        warn, kept.pin_warned = not kept.pin_warned, True
    if warn:
        warnings.warn(
            "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used.",
            stacklevel=4,
        )
    return False
