"""How one batch is loaded: the same steps as torch's fetchers, run by the loader's workers.

:class:`Workers` is what torch's worker processes have of their own, made per worker thread:
a shallow copy of the dataset, a :class:`~torch.utils.data.WorkerInfo` and one
``worker_init_fn`` call. The fetchers load a batch the way torch's ``_MapDatasetFetcher`` and
``_IterableDatasetFetcher`` do.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import itertools
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

from torch.utils.data import ConcatDataset, Dataset, StackDataset, Subset

import datapipes as dp
from torch_threadloader.budget import ByteBudget, nbytes
from torch_threadloader.pipeline_stats import CPU_SAMPLE_INTERVAL, LoaderStats, Stage, marked, set_current
from torch_threadloader.resume import tag_error
from torch_threadloader.sample_rng import sample_draws, sample_generator
from torch_threadloader.skip import (
    ErrorPolicy,
    Failed,
    attempt,
    current_position,
    forget_used,
    stage_of,
    used_indices,
)
from torch_threadloader.worker_info import hidden_from_torch, make_worker_info, sample_worker_info, set_worker_info

__all__ = [
    "AsyncMapFetcher",
    "IterableWorkerStream",
    "MapFetcher",
    "Workers",
    "batch_getter",
    "drawn_per_sample",
    "gather_window",
    "is_async_dataset",
    "rebound",
]


def _torchs(dataset: object, cls: type, name: str) -> bool:
    """Whether ``dataset``'s method ``name`` is ``cls``'s own (a torch wrapper not overridden)."""
    return isinstance(dataset, cls) and getattr(type(dataset), name, None) is getattr(cls, name)


def is_async_dataset(dataset: object) -> bool:
    """True when the dataset's ``__getitem__`` or ``__getitems__`` is a coroutine function,
    or it is torch's ``Subset`` of such a dataset, or its ``ConcatDataset`` of such datasets
    only (``random_split`` of an async dataset stays async). Raises ``ValueError`` for a
    ``ConcatDataset`` of async and sync datasets (its items would be half coroutines)."""
    if _torchs(dataset, Subset, "__getitem__"):
        return is_async_dataset(dataset.dataset)  # type: ignore[attr-defined]
    if _torchs(dataset, ConcatDataset, "__getitem__"):
        kinds = {is_async_dataset(part) for part in dataset.datasets}  # type: ignore[attr-defined]
        if len(kinds) > 1:
            raise ValueError(
                "dataset: a ConcatDataset of async and sync datasets cannot be loaded (some items would be "
                "coroutines); concatenate datasets of one kind"
            )
        return kinds == {True}
    if _torchs(dataset, StackDataset, "__getitem__"):
        parts = dataset.datasets  # type: ignore[attr-defined]
        if any(is_async_dataset(part) for part in (parts.values() if isinstance(parts, dict) else parts)):
            raise ValueError(
                "dataset: a StackDataset of async datasets cannot be loaded (its items would hold coroutines); "
                "stack the items in an async dataset of your own"
            )
    cls = type(dataset)
    return any(inspect.iscoroutinefunction(getattr(cls, name, None)) for name in ("__getitem__", "__getitems__"))


def async_batch_getter(dataset: object) -> Callable[[Any], Any] | None:
    """The dataset's ``async def __getitems__``; for torch's ``Subset`` of a dataset with one,
    a coroutine function awaiting what the Subset's (sync) ``__getitems__`` returns (the inner
    dataset's coroutine); else ``None``."""
    getitems = getattr(dataset, "__getitems__", None)
    if getitems is None:
        return None
    if inspect.iscoroutinefunction(getitems):
        return cast(Callable[[Any], Any], getitems)
    if _torchs(dataset, Subset, "__getitems__") and async_batch_getter(dataset.dataset) is not None:  # type: ignore[attr-defined]

        async def subset_items(indices: Any) -> Any:
            return await getitems(indices)

        return subset_items
    return None


def batch_getter(dataset: object) -> Callable[[Any], Any] | None:
    """The dataset's ``__getitems__``, or ``None`` where it has none or where it is torch's
    ``Subset`` or ``StackDataset`` over datasets without one: those only call ``__getitem__``
    item after item, which ``item_concurrency`` does concurrently instead."""
    getitems = getattr(dataset, "__getitems__", None) or None
    if getitems is None:
        return None
    # Only a wrapper whose __getitem__ is torch's too: a subclass's own __getitem__ is not what
    # torch's __getitems__ (which torch's DataLoader calls) returns.
    if _torchs(dataset, Subset, "__getitems__") and _torchs(dataset, Subset, "__getitem__"):
        return getitems if batch_getter(dataset.dataset) is not None else None  # type: ignore[attr-defined]
    if _torchs(dataset, StackDataset, "__getitems__") and _torchs(dataset, StackDataset, "__getitem__"):
        parts = dataset.datasets  # type: ignore[attr-defined]
        parts = parts.values() if isinstance(parts, dict) else parts
        return getitems if any(batch_getter(part) is not None for part in parts) else None
    return cast(Callable[[Any], Any], getitems)


class Workers:
    """The ``num_workers`` workers of an epoch (or, with ``persistent_workers=True``, of the
    loader's life): for each, its own copy of the dataset made when the worker starts
    (``worker_copy="shallow"``: ``copy.copy``, the default; ``"deep"``: ``copy.deepcopy``), its
    ``WorkerInfo`` (seed ``base_seed + id``, as torch derives it) and one
    ``worker_init_fn(id)`` call. A ``worker_init_fn`` that holds the dataset (a bound method of
    it, a ``functools.partial`` with it as an argument or of such a method, nested) is called
    on the worker's copy instead, as torch's pickling gives a worker process its own
    (:func:`rebound`). A dataset that cannot be copied is shared, with one warning (one that
    cannot be deep-copied gets a shallow copy, with one warning); with ``copy_dataset=False``
    every worker shares it. ``on_copy`` is called with each copy made (an async dataset's
    copies have their ``aclose()`` awaited).
    Thread-safe: each worker starts on its own thread."""

    def __init__(
        self,
        dataset: Any,
        num_workers: int,
        base_seed: int,
        worker_init_fn: Callable[[int], object] | None,
        *,
        copy_dataset: bool = True,
        worker_copy: str = "shallow",
        on_copy: Callable[[Any], object] | None = None,
    ) -> None:
        self.dataset = dataset
        self.copy_dataset = copy_dataset
        self.worker_copy = worker_copy
        self.on_copy = on_copy
        self.num_workers = num_workers
        self.base_seed = base_seed
        self.worker_init_fn = None if reseeds_the_process(worker_init_fn) else worker_init_fn
        self._lock = threading.Lock()
        self._infos: dict[int, Any] = {}
        self._start_locks: dict[int, threading.Lock] = {}
        self._warned: set[str] = set()

    def start(self, worker_id: int) -> Any:
        """Make the calling thread worker ``worker_id``: its info is set and, the first time,
        its dataset copy is made and ``worker_init_fn`` runs (once, also when two epochs start
        the same persistent worker at once; the info is shared only after it returned).
        Returns the worker's dataset."""
        with self._lock:
            info = self._infos.get(worker_id)
            start_lock = self._start_locks.setdefault(worker_id, threading.Lock())
        if info is None:
            with start_lock:
                with self._lock:
                    info = self._infos.get(worker_id)
                if info is None:
                    dataset, init = self._copy()
                    info = make_worker_info(worker_id, self.num_workers, self.base_seed + worker_id, dataset)
                    set_worker_info(info)
                    if init is not None:
                        init(worker_id)
                    with self._lock:
                        self._infos[worker_id] = info
                    return info.dataset
        set_worker_info(info)
        return info.dataset

    def started_datasets(self) -> dict[int, Any]:
        """The dataset copies of the workers started so far, by worker id."""
        with self._lock:
            return {w: info.dataset for w, info in self._infos.items()}

    def info(self, worker_id: int) -> Any:
        """The worker's info, starting it on the calling thread the first time (async)."""
        with self._lock:
            info = self._infos.get(worker_id)
        if info is None:
            self.start(worker_id)
            with self._lock:
                info = self._infos[worker_id]
        return info

    def _copy(self) -> tuple[Any, Callable[[int], object] | None]:
        """A new worker's dataset and its ``worker_init_fn``, rebound onto that dataset."""
        init = self.worker_init_fn
        if not self.copy_dataset:
            return self.dataset, init
        copies: dict[int, Any] = {}
        made: Any = self.dataset
        if self.worker_copy == "deep":
            try:
                made = copy.deepcopy(self.dataset, copies)
            except Exception as exc:
                copies = {}
                self._warn_once("deep", f"cannot be deep-copied ({exc!r}); each worker thread gets a shallow copy")
        if not copies:
            try:
                made = copy.copy(self.dataset)
            except Exception as exc:
                self._warn_once(
                    "shallow",
                    f"cannot be copied ({exc!r}); the worker threads share it instead of each having its own "
                    "copy as torch's worker processes do",
                )
                return self.dataset, init
        copies[id(self.dataset)] = made
        if self.on_copy is not None:
            self.on_copy(made)
        return made, None if init is None else rebound(init, copies)

    def _warn_once(self, kind: str, what: str) -> None:
        with self._lock:
            warn = kind not in self._warned
            self._warned.add(kind)
        if warn:
            warnings.warn(f"the dataset {type(self.dataset).__name__} {what}", RuntimeWarning, stacklevel=4)


def rebound(fn: Any, copies: dict[int, Any]) -> Any:
    """``fn`` with each object it holds that has a copy in ``copies`` (by ``id``) replaced by
    that copy, as pickling the dataset and ``fn`` together into a worker process maps them:
    the ``__self__`` of a bound method, and the function, arguments and keywords of a
    ``functools.partial`` (recursively, so a partial of a bound method too). Anything else
    (a plain function, a closure, a callable object) is ``fn`` itself."""
    if isinstance(fn, types.MethodType):
        target = copies.get(id(fn.__self__))
        return fn if target is None else types.MethodType(fn.__func__, target)
    if type(fn) is functools.partial:
        func = rebound(fn.func, copies)
        args = tuple(_swapped(a, copies) for a in fn.args)
        keywords = {k: _swapped(v, copies) for k, v in fn.keywords.items()}
        same = func is fn.func and all(a is b for a, b in zip(args, fn.args, strict=True))
        if same and all(keywords[k] is v for k, v in fn.keywords.items()):
            return fn
        return functools.partial(func, *args, **keywords)
    return fn


def _swapped(value: Any, copies: dict[int, Any]) -> Any:
    if isinstance(value, types.MethodType) or type(value) is functools.partial:
        return rebound(value, copies)
    return copies.get(id(value), value)


def reseeds_the_process(worker_init_fn: object) -> bool:
    """Lightning's ``seed_everything(workers=True)`` sets ``worker_init_fn`` to its
    ``pl_worker_init_function``, which seeds torch's, ``random``'s and NumPy's *global*
    generators: per worker in a worker process, but from a worker thread it would reseed the
    training process's own generators (at a moment that races with the training thread). Its
    aim, a distinct seed per worker, is what each worker thread's ``WorkerInfo.rng`` and
    ``thread_safe_generator()`` already give (``base_seed + id``, as torch), so it is not called."""
    fn = getattr(worker_init_fn, "func", worker_init_fn)  # functools.partial(fn, rank=...)
    return getattr(fn, "__name__", "") == "pl_worker_init_function" and str(getattr(fn, "__module__", "")).startswith(
        ("lightning", "pytorch_lightning")
    )


class MapFetcher:
    """Loads one batch of a map-style dataset exactly as torch's ``_MapDatasetFetcher``:
    ``__getitems__(indices)`` when the dataset defines it, else ``[dataset[i] for i in indices]``
    (``item_concurrency`` of them at once on ``items_pool()``, each with the worker's info),
    then ``collate_fn``. Without auto-collation the index is a single key and ``collate_fn``
    converts one item. ``finish`` (pinning) runs on the result."""

    def __init__(
        self,
        *,
        auto_collation: bool,
        collate_fn: Callable[[Any], Any],
        item_concurrency: int,
        items_pool: Callable[[], dp.ThreadPool] | None,
        return_indices: bool,
        finish: Callable[[Any], Any] | None,
        stats: LoaderStats | None = None,
        policy: ErrorPolicy | None = None,
        budget: ByteBudget | None = None,
        sample_rng: tuple[int, int] | None = None,
    ) -> None:
        self.stats = stats
        self.policy = policy if policy is not None and policy.skips else None
        self.budget = budget
        self.sample_rng = sample_rng  # per_sample_rng: (base seed, epoch) of this epoch's draws
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.item_concurrency = item_concurrency
        self.items_pool = items_pool
        self.return_indices = return_indices
        self.finish = finish

    def plain(self, dataset: Any) -> Callable[[Any], Any]:
        """The loading function for ``dataset`` in the caller's thread (``num_workers=0``),
        with nothing to look up per batch in the common case."""
        if (
            self.stats is None
            and self.policy is None
            and self.budget is None
            and not self.return_indices
            and self.auto_collation
            and self.item_concurrency == 1
            and self.finish is None
            and self.sample_rng is None
            and batch_getter(dataset) is None
        ):
            getitem, collate = dataset.__getitem__, self.collate_fn

            def load(indices: Any) -> Any:
                return collate([getitem(i) for i in indices])

            return load
        return self.for_dataset(dataset, None)

    def for_worker(self, workers: Workers) -> Callable[[int], Callable[[Any], Any]]:
        """``worker_fn`` for a ThreadMapper: worker ``w`` starts, then loads with its own copy."""

        def start(worker_id: int) -> Callable[[Any], Any]:
            dataset = workers.start(worker_id)
            return self.for_dataset(dataset, workers.info(worker_id))

        return start

    def _getters(self, dataset: Any, info: Any) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any]]:
        """The dataset's batch getter (or None) and ``__getitem__``, each run under its
        sample's draws with ``per_sample_rng`` (a batch getter under its first index's)."""
        getitems, getitem = batch_getter(dataset), dataset.__getitem__
        if self.sample_rng is None:
            return getitems, getitem
        seed, epoch = self.sample_rng
        return (
            None if getitems is None else drawn_per_sample(getitems, seed, epoch, info, key=_first),
            drawn_per_sample(getitem, seed, epoch, info),
        )

    def for_dataset(self, dataset: Any, info: Any) -> Callable[[Any], Any]:
        if self.stats is not None:
            return self._with_stats(dataset, info, self.stats)
        getitems, getitem = self._getters(dataset, info)
        auto, collate, finish, return_indices = self.auto_collation, self.collate_fn, self.finish, self.return_indices
        concurrent = self.item_concurrency > 1 and self.items_pool is not None and getitems is None
        limit, items_pool = self.item_concurrency, self.items_pool
        items = self.items_loader(getitem, getitems, info)

        def getitem_as_worker(index: Any) -> Any:
            set_worker_info(info)  # an item thread works for the worker that loads the batch
            try:
                return getitem(index)
            finally:
                set_worker_info(None)

        def load(indices: Any) -> Any:
            if not auto:
                data = getitem(indices)
            elif items is not None:
                data = items(indices)
            elif getitems is not None:
                data = getitems(indices)
            elif concurrent and len(indices) > 1:
                data = items_pool().map_window(getitem_as_worker, indices, limit)  # type: ignore[misc]
            else:
                data = [getitem(i) for i in indices]
            if info is None:
                batch = collate(data)
            else:
                with hidden_from_torch():
                    batch = collate(data)
            if finish is not None:
                batch = finish(batch)
            if return_indices and items is not None:
                indices = used_indices() or indices  # a skipped sample's slot names its replacement
            return (indices, batch) if return_indices else batch

        return load

    def items_loader(
        self, getitem: Callable[[Any], Any], getitems: Callable[[Any], Any] | None, info: Any
    ) -> Callable[[Any], list[Any]] | None:
        """A batch's items with a skipping policy (failing samples recorded and replaced; a
        failing ``__getitems__`` is loaded again item by item to find them) and a byte budget
        (each item charged to its batch as it comes); ``None`` with neither."""
        policy, budget = self.policy, self.budget
        if policy is None and budget is None:
            return None
        concurrent = self.item_concurrency > 1 and self.items_pool is not None and getitems is None
        limit, items_pool = self.item_concurrency, self.items_pool
        fetch = self.stats.stages["fetch"] if self.stats is not None else None

        def fetched(index: Any) -> Any:
            value = attempt(getitem, index) if policy is not None else getitem(index)
            if isinstance(value, Failed) and fetch is not None and stage_of(value.exc) == "fetch":
                fetch.add_error()  # a stage() counted its own
            return value

        def one(index: Any, position: int | None) -> Any:
            if budget is None or position is None:
                return fetched(index)
            reserved = budget.admit(position)  # room first, then the fetch
            size = 0
            try:
                value = fetched(index)
                size = 0 if isinstance(value, Failed) else nbytes(value)
            finally:
                budget.charge(position, size, reserved)
            return value

        def items(indices: Any) -> list[Any]:
            position = current_position()
            forget_used()
            if getitems is not None:
                counted = budget is not None and position is not None
                reserved = budget.admit(position, len(indices)) if counted else 0  # type: ignore[union-attr, arg-type]
                size = 0
                try:
                    values = list(getitems(indices))
                    size = nbytes(values)
                except Exception:
                    if policy is None:
                        raise
                else:  # charged as one
                    return values
                finally:
                    if counted:
                        budget.charge(position, size, reserved, len(indices))  # type: ignore[union-attr, arg-type]
            if concurrent and len(indices) > 1:

                def one_as_worker(index: Any) -> Any:
                    set_worker_info(info)
                    try:
                        return one(index, position)
                    finally:
                        set_worker_info(None)

                outcomes = items_pool().map_window(one_as_worker, indices, limit)  # type: ignore[misc]
            else:
                outcomes = [one(i, position) for i in indices]
            return policy.settle(indices, outcomes) if policy is not None else outcomes

        return items

    def _with_stats(self, dataset: Any, info: Any, stats: LoaderStats) -> Callable[[Any], Any]:
        """``for_dataset``'s loading function, timing each item and each stage into ``stats``.
        An item's time leaves out what it marked as another stage (:func:`stage`)."""
        getitems, getitem = self._getters(dataset, info)
        auto, collate, finish, return_indices = self.auto_collation, self.collate_fn, self.finish, self.return_indices
        concurrent = self.item_concurrency > 1 and self.items_pool is not None and getitems is None
        limit, items_pool = self.item_concurrency, self.items_pool
        fetch, collating, pinning = stats.stages["fetch"], stats.stages["collate"], stats.stages["pin"]
        perf, cpu_now = time.perf_counter, time.thread_time
        sampling = threading.local()  # when this thread next measures its CPU time
        items = self.items_loader(getitem, getitems, info)

        def timed(index: Any, durations: list[float]) -> Any:
            before = marked()
            start = perf()
            try:
                return getitem(index)
            except BaseException:
                fetch.add_error()
                raise
            finally:
                durations.append(perf() - start - (marked() - before))

        def timed_as_worker(item: tuple[Any, list[float], list[float]]) -> Any:
            # On an item thread: its CPU time too (items run here concurrently, usually I/O).
            index, durations, cpus = item
            set_worker_info(info)
            set_current(stats)
            cpu = cpu_now()
            try:
                return timed(index, durations)
            finally:
                cpus.append(cpu_now() - cpu)
                set_worker_info(None)

        set_current(stats)  # this thread's: the worker's (made on it), or the caller's without workers

        def load(indices: Any) -> Any:
            durations: list[float] = []
            item_cpu: float | None = None
            start = perf()
            measure = not concurrent and start >= getattr(sampling, "next", 0.0)
            cpu_start = cpu_now() if measure else 0.0
            if not auto:
                data = timed(indices, durations)
            elif items is not None:
                data = timed_many(items, indices, fetch, count_errors=self.policy is None)
            elif getitems is not None:
                data = timed_many(getitems, indices, fetch)
            elif concurrent and len(indices) > 1:
                cpus: list[float] = []
                data = items_pool().map_window(timed_as_worker, [(i, durations, cpus) for i in indices], limit)  # type: ignore[misc]
                item_cpu = sum(cpus)
            else:
                before = marked() if stats.marks else 0.0
                data = []
                append, add = data.append, durations.append
                for i in indices:
                    t = perf()
                    try:
                        append(getitem(i))
                    except BaseException:
                        fetch.add_error()
                        raise
                    add(perf() - t)
                marked_here = marked() - before if stats.marks else 0.0
                if marked_here and durations:  # the marked stages' time, spread over the items
                    share = marked_here / len(durations)
                    durations = [d - share for d in durations]
            fetched = perf()
            if measure:
                cpu_fetched = cpu_now()
                fetch.record_many(durations, cpu=cpu_fetched - cpu_start, wall=fetched - start)
            elif item_cpu is not None:  # the items' own CPU time over their own time
                fetch.record_many(durations, cpu=item_cpu, wall=sum(durations))
            else:
                fetch.record_many(durations)
            if info is None:
                batch = collate(data)
            else:
                with hidden_from_torch():
                    batch = collate(data)
            collated = perf()
            if measure:
                collating.record_many([collated - fetched], cpu=cpu_now() - cpu_fetched, wall=collated - fetched)
                sampling.next = collated + CPU_SAMPLE_INTERVAL
            else:
                collating.record(collated - fetched)
            if finish is not None:
                batch = finish(batch)
                pinning.record(perf() - collated)
            if info is not None:
                stats.worker_busy(perf() - start)
            if return_indices and items is not None:
                indices = used_indices() or indices
            return (indices, batch) if return_indices else batch

        return load


def _first(indices: Any) -> Any:
    return indices[0] if len(indices) else 0


def drawn_per_sample(
    getitem: Callable[[Any], Any],
    seed: int,
    epoch: int,
    info: Any,
    *,
    key: Callable[[Any], Any] | None = None,
) -> Callable[[Any], Any]:
    """``getitem`` run, for each index, under :func:`~torch_threadloader.sample_rng.sample_draws`
    of ``sample_generator(seed, epoch, index)`` (``key(index)`` with ``key``), with a worker
    info whose ``rng`` is the sample's (so ``torch.random.thread_safe_generator()`` is that
    generator, and ``rng.random_generator``/``numpy_generator`` are seeded from it); the
    worker's own info is set back after. The draws depend on nothing but the three numbers:
    not on the thread, the worker or the timing. torch's global generator is not touched."""

    def getitem_drawn(index: Any) -> Any:
        try:
            generator = sample_generator(seed, epoch, index if key is None else key(index))
        except ValueError as exc:
            exc.add_note(f"per_sample_rng=True draws per index, and needs int indices >= 0: got {index!r}")
            raise
        if info is not None:
            set_worker_info(sample_worker_info(info, generator))
        try:
            with sample_draws(generator):
                return getitem(index)
        finally:
            if info is not None:
                set_worker_info(info)

    return getitem_drawn


def timed_many(getitems: Callable[[Any], Any], indices: Any, fetch: Stage, *, count_errors: bool = True) -> Any:
    """``getitems(indices)`` timed as one call, its time spread over the items; an error
    counted once, unless ``getitems`` counts each sample's (a skipping policy does)."""
    start = time.perf_counter()
    try:
        data = getitems(indices)
    except BaseException:
        if count_errors:
            fetch.add_error()
        raise
    each = (time.perf_counter() - start) / max(len(indices), 1)
    fetch.record_many([each] * len(indices))
    return data


class AsyncMapFetcher:
    """Loads one batch of an async map-style dataset on the event loop: ``await
    __getitems__(indices)`` when it is async, else ``await dataset[i]`` for each index with at
    most ``item_concurrency`` in flight. Batch ``i`` of the epoch is loaded by worker
    ``i % num_workers`` (its dataset copy; its ``WorkerInfo`` in the batch's context, so
    ``get_worker_info()`` answers inside the coroutines). On the first error the batch's
    other coroutines are cancelled and awaited, and that error is raised. Collation happens
    after, off the loop. Called with ``(position, indices)``, it gives ``(position, (indices,
    data))``; an error carries its position (:func:`~torch_threadloader.resume.tag_error`)."""

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        auto_collation: bool,
        item_concurrency: int,
        workers: Workers | None,
        stats: LoaderStats | None = None,
        policy: ErrorPolicy | None = None,
        worker_of: Callable[[int], int] | None = None,
    ) -> None:
        self.stats = stats
        self.policy = policy if policy is not None and policy.skips else None
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.item_concurrency = item_concurrency
        self.workers = workers
        self.worker_of = worker_of  # position -> its worker (modulo num_workers); None: the position

    def __call__(self, item: tuple[int, Any]) -> Any:
        # Called in the consumer's thread when the batch is started.
        position, index = item
        workers = self.workers
        if workers is None:
            return self._tagged(position, self._load(self.dataset, None, index, position))
        worker = position if self.worker_of is None else self.worker_of(position)
        return self._tagged(position, self._load(None, worker % workers.num_workers, index, position))

    @staticmethod
    async def _tagged(position: int, load: Any) -> tuple[int, Any]:
        try:
            return position, await load
        except BaseException as exc:
            tag_error(exc, position)
            raise

    async def _load(self, dataset: Any, worker_id: int | None, index: Any, position: int) -> tuple[Any, Any]:
        if worker_id is not None:
            assert self.workers is not None
            info = self.workers.info(worker_id)  # on the loop thread, in this task's context
            set_worker_info(info)
            dataset = info.dataset
        stats = self.stats
        if stats is not None:
            set_current(stats)
        fetch = stats.stages["fetch"] if stats is not None else None
        if not self.auto_collation:
            return index, await _timed(dataset[index], fetch)
        getitems = async_batch_getter(dataset)
        if getitems is not None:
            return index, await _timed(getitems(index), fetch)
        if self.policy is not None:
            outcomes = await _attempt_window(index, dataset, self.item_concurrency, fetch)
            values = self.policy.settle(index, outcomes, position)
            return used_indices() or index, values
        return index, await gather_window(index, dataset, self.item_concurrency, fetch)


async def _timed(awaitable: Any, fetch: Stage | None) -> Any:
    if fetch is None:
        return await awaitable
    start = time.perf_counter()
    try:
        return await awaitable
    except BaseException:
        fetch.add_error()
        raise
    finally:
        fetch.record_many([time.perf_counter() - start])


class _Escaped(Exception):
    """Carries a ``SystemExit`` or ``KeyboardInterrupt`` out of a task of the batch: asyncio
    re-raises those two out of the event loop (killing it) when a task raises them."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(exc)
        self.exc = exc


async def _held(awaitable: Any) -> Any:
    """``await awaitable``, a ``SystemExit`` or ``KeyboardInterrupt`` wrapped in :class:`_Escaped`."""
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Escaped(exc) from None


async def _attempt_window(keys: Sequence[Any], dataset: Any, limit: int, fetch: Stage | None) -> list[Any]:
    """Every item of the batch, at most ``limit`` at once; a failure is :class:`Failed`
    (``SystemExit`` and ``KeyboardInterrupt`` are raised, as themselves)."""
    semaphore = asyncio.Semaphore(limit)

    async def one(key: Any) -> Any:
        async with semaphore:
            try:
                return await _held(_timed(dataset[key], fetch))
            except _Escaped:
                raise
            except Exception as exc:
                return Failed(exc)

    try:
        return list(await asyncio.gather(*(one(key) for key in keys)))
    except _Escaped as escaped:
        raise escaped.exc from None


async def gather_window(keys: Sequence[Any], dataset: Any, limit: int, fetch: Stage | None = None) -> list[Any]:
    """``[await dataset[k] for k in keys]`` with at most ``limit`` in flight; on the first
    failure (in key order) the others are cancelled and awaited, and it is raised as itself."""
    semaphore = asyncio.Semaphore(limit)

    async def one(key: Any) -> Any:
        async with semaphore:
            return await _held(_timed(dataset[key], fetch))

    tasks = [asyncio.ensure_future(one(key)) for key in keys]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:  # the first failure in index order
            if task.done() and not task.cancelled() and task.exception() is not None:
                error = task.exception()
                raise error.exc if isinstance(error, _Escaped) else error  # type: ignore[misc]
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Counted(Iterator[Any]):
    """An iterator that counts the items taken from it, failed ones included."""

    __slots__ = ("count", "it")

    def __init__(self, it: Iterator[Any]) -> None:
        self.it = it
        self.count = 0

    def __next__(self) -> Any:
        try:
            item = next(self.it)
        except StopIteration:
            raise
        except BaseException:
            self.count += 1
            raise
        self.count += 1
        return item

    def __iter__(self) -> _Counted:
        return self


class IterableWorkerStream:
    """The batches of one worker of an ``IterableDataset``, as torch's
    ``_IterableDatasetFetcher`` makes them in one worker process: started on the worker's
    thread (its dataset copy, info and ``worker_init_fn``), ``iter(dataset)`` once; each call
    then collates up to ``batch_size`` items (ending on an empty or, with ``drop_last``, a
    short batch), or converts one item without batching. ``StopIteration`` ends the stream.

    Resume: ``skip_items`` items are read and dropped first (a dataset without state of its
    own, resumed after the batches it delivered). With ``tag``, each batch comes as ``(tag(self),
    batch)``, ``tag(self)`` called after the batch was made (an error carries it).
    """

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int | None,
        drop_last: bool,
        collate_fn: Callable[[Any], Any],
        finish: Callable[[Any], Any] | None,
        worker: bool,
        skip_items: int = 0,
        tag: Callable[[IterableWorkerStream], Any] | None = None,
        stats: LoaderStats | None = None,
        count_items: bool = False,
    ) -> None:
        self.stats = stats
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.finish = finish
        self.worker = worker
        self._it: Iterator[Any] = iter(dataset)
        self._counted: _Counted | None = None
        if count_items:  # the items read, failing ones included: what a resume reads again
            self._counted = _Counted(self._it)
            self._it = self._counted
        self._ended = False
        self.exhausted = False  # the dataset's iterator ended (a short last batch was made)
        self._skip = skip_items
        self._tag = tag

    def __iter__(self) -> IterableWorkerStream:
        return self

    @property
    def iterator(self) -> Iterator[Any]:
        """The dataset's iterator, as ``iter(dataset)`` made it."""
        return self._counted.it if self._counted is not None else self._it

    @property
    def items_read(self) -> int:
        """Items taken from the dataset's iterator (with ``count_items``), failures included."""
        return self._counted.count if self._counted is not None else 0

    def __call__(self, _token: object = None) -> Any:
        return next(self)

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        if self._skip:
            self._skip_items()
        if self.stats is not None:
            set_current(self.stats)
        tag = self._tag
        if tag is None:
            return self._next()
        try:
            batch = self._next()
        except StopIteration:
            raise
        except BaseException as exc:
            tag_error(exc, tag(self))
            raise
        return tag(self), batch

    def _skip_items(self) -> None:
        """Read again and drop the items the resumed run delivered (or failed on)."""
        skip, self._skip = self._skip, 0
        it = self._it
        for _ in range(skip):
            try:
                next(it)
            except StopIteration:
                return
            except Exception:
                pass  # an item that failed in the run resumed: it was delivered as its error

    def _next(self) -> Any:
        stats = self.stats
        start = time.perf_counter() if stats is not None else 0.0
        if self.batch_size is None:
            try:
                item = next(self._it)
            except StopIteration:
                self._ended = True
                raise
            if stats is not None:
                stats.stages["fetch"].record(time.perf_counter() - start)
            return self._collate(item)
        data = list(itertools.islice(self._it, self.batch_size))
        if stats is not None and data:
            each = (time.perf_counter() - start) / len(data)
            stats.stages["fetch"].record_many([each] * len(data))
        if len(data) < self.batch_size:
            self.exhausted = True
        if not data or (self.drop_last and len(data) < self.batch_size):
            self._ended = True
            raise StopIteration
        return self._collate(data)

    def _collate(self, data: Any) -> Any:
        start = time.perf_counter()
        if self.worker:
            with hidden_from_torch():
                batch = self.collate_fn(data)
        else:
            batch = self.collate_fn(data)
        if self.stats is not None:
            self.stats.stages["collate"].record(time.perf_counter() - start)
        return batch if self.finish is None else self.finish(batch)

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """End the stream; a dataset's iterator that is a node epoch stops within ``timeout``."""
        self._ended = True
        shutdown = getattr(self.iterator, "shutdown", None)
        if shutdown is not None:
            return shutdown(timeout, warn=warn) is not False
        close = getattr(self.iterator, "close", None)
        if close is not None:
            close()
        return True
