"""The stats-wrapped path of :class:`~torch_threadloader.fetch.map_fetcher.MapFetcher`
(``stats=True``): each item and each stage of a batch timed into the loader's stats.

An item's time leaves out what it marked as another stage (:func:`~torch_threadloader.stage`).
A worker thread measures its CPU time over a batch at most every ``CPU_SAMPLE_INTERVAL``
seconds. The loading function is put together once per worker from small steps (fetch the
items, record them, collate and pin), each chosen for the dataset and settings up front, so a
batch runs no test whose answer cannot change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeAlias

from torch_threadloader.collate import collate_as_worker
from torch_threadloader.fetch.getters import GetItem, GetItems, ItemWindow, Load, Loaded, MapDataset
from torch_threadloader.skip import TooManyErrors, note_raised_in, used_indices
from torch_threadloader.stats import CPU_SAMPLE_INTERVAL, LoaderStats, Stage, marked, set_current
from torch_threadloader.userdata import Batch, CollateFn, Index, Indices, Sample
from torch_threadloader.worker_info import set_worker_info

if TYPE_CHECKING:
    from torch.utils.data._utils.worker import WorkerInfo

    from torch_threadloader.skip import ErrorPolicy

__all__ = ["TimedFetcher", "timed_loader", "timed_many"]


class TimedFetcher(Protocol):
    """What the timed path reads of its fetcher (a
    :class:`~torch_threadloader.fetch.map_fetcher.MapFetcher`)."""

    auto_collation: bool
    collate_fn: CollateFn
    return_indices: bool
    finish: Callable[[Batch], Batch] | None
    policy: ErrorPolicy | None

    @property
    def every_batch(self) -> bool: ...

    def getters(self, dataset: MapDataset, info: WorkerInfo | None) -> tuple[GetItems | None, GetItem]: ...

    def window(self, getitems: GetItems | None) -> ItemWindow | None: ...

    def items_loader(self, getitem: GetItem, getitems: GetItems | None, info: WorkerInfo | None) -> GetItems | None: ...


#: A batch's items (one item without auto-collation), their durations, and their own CPU time
#: (item threads) or ``None``.
Fetched: TypeAlias = tuple[list[Sample] | Sample, list[float], float | None]


def timed_loader(fetcher: TimedFetcher, dataset: MapDataset, info: WorkerInfo | None, stats: LoaderStats) -> Load:
    """``fetcher.for_dataset``'s loading function, timing each item and each stage into
    ``stats``; it loads the same batches as the function without stats."""
    getitems, getitem = fetcher.getters(dataset, info)
    items = fetcher.items_loader(getitem, getitems, info)
    window = fetcher.window(getitems)
    concurrent = window is not None
    fetch_items = _fetch_step(fetcher, stats, info, getitem, getitems, items, window)
    sampling = threading.local()  # when this thread next measures its CPU time
    collate = _collate_step(fetcher, stats, info, sampling)
    fetch = stats.stages["fetch"]
    perf, cpu_now = time.perf_counter, time.thread_time
    return_indices = fetcher.return_indices
    replaced = return_indices and items is not None  # a skipped sample's slot names its replacement
    set_current(stats)  # this thread's: the worker's (made on it), or the caller's without workers
    # What a fetch error not noted by its item is noted as raised in, as without stats.
    fetch_stage = "__getitems__" if fetcher.auto_collation and getitems is not None else "__getitem__"

    def load(indices: Indices) -> Loaded:
        start = perf()
        measure = not concurrent and start >= getattr(sampling, "next", 0.0)
        cpu_start = cpu_now() if measure else 0.0
        try:
            data, durations, item_cpu = fetch_items(indices)
        except Exception as exc:
            if not isinstance(exc, TooManyErrors):  # the epoch's count, not this batch's call
                note_raised_in(exc, fetch_stage, indices)
            raise
        fetched = perf()
        cpu_fetched: float | None = None
        if measure:
            cpu_fetched = cpu_now()
            fetch.record_many(durations, cpu=cpu_fetched - cpu_start, wall=fetched - start)
        elif item_cpu is not None:  # the items' own CPU time over their own time
            fetch.record_many(durations, cpu=item_cpu, wall=sum(durations))
        else:
            fetch.record_many(durations)
        batch = collate(indices, data, fetched, cpu_fetched)
        if info is not None:
            stats.worker_busy(perf() - start)
        if replaced:
            indices = used_indices() or indices
        return (indices, batch) if return_indices else batch

    return load


def _fetch_step(
    fetcher: TimedFetcher,
    stats: LoaderStats,
    info: WorkerInfo | None,
    getitem: GetItem,
    getitems: GetItems | None,
    items: GetItems | None,
    window: ItemWindow | None,
) -> Callable[[Indices], Fetched]:
    """How a batch's items are fetched and timed, chosen once: one key (no auto-collation),
    the skipping/budget loader or ``__getitems__`` (timed as one call), item threads, or one
    item after another in this thread."""
    fetch = stats.stages["fetch"]
    if not fetcher.auto_collation:
        timed = _timed_item(getitem, fetch)

        def single(index: Index) -> Fetched:
            durations: list[float] = []
            return timed(index, durations), durations, None

        return single
    whole = items if items is not None else getitems
    if whole is not None:
        count_errors = items is None or fetcher.policy is None

        def at_once(indices: Indices) -> Fetched:
            return timed_many(whole, indices, fetch, count_errors=count_errors), [], None

        return at_once
    sequential = _sequential(getitem, stats)
    if window is None:
        return sequential
    on_threads = _on_item_threads(window, getitem, info, stats)
    if fetcher.every_batch:
        return on_threads

    def either(indices: Indices) -> Fetched:
        return on_threads(indices) if len(indices) > 1 else sequential(indices)

    return either


def _timed_item(getitem: GetItem, fetch: Stage) -> Callable[[Index, list[float]], Sample]:
    """``getitem(index)``, its time less what it marked appended to ``durations``; an error
    counted, and noted as raised in ``__getitem__(index)``."""
    perf = time.perf_counter

    def timed(index: Index, durations: list[float]) -> Sample:
        before = marked()
        start = perf()
        try:
            return getitem(index)
        except BaseException as exc:
            fetch.add_error()
            if isinstance(exc, Exception):
                note_raised_in(exc, "__getitem__", index)
            raise
        finally:
            durations.append(perf() - start - (marked() - before))

    return timed


def _sequential(getitem: GetItem, stats: LoaderStats) -> Callable[[Indices], Fetched]:
    """The batch's items one after another in this thread (an error noted as raised in
    ``__getitem__(index)``); the time the items marked as other stages is spread over them."""
    fetch = stats.stages["fetch"]
    perf = time.perf_counter

    def load(indices: Indices) -> Fetched:
        before = marked() if stats.marks else 0.0
        data: list[Sample] = []
        durations: list[float] = []
        append, add = data.append, durations.append
        for i in indices:
            t = perf()
            try:
                append(getitem(i))
            except BaseException as exc:
                fetch.add_error()
                if isinstance(exc, Exception):
                    note_raised_in(exc, "__getitem__", i)
                raise
            add(perf() - t)
        marked_here = marked() - before if stats.marks else 0.0
        if marked_here and durations:  # the marked stages' time, spread over the items
            share = marked_here / len(durations)
            durations = [d - share for d in durations]
        return data, durations, None

    return load


def _on_item_threads(
    window: ItemWindow, getitem: GetItem, info: WorkerInfo | None, stats: LoaderStats
) -> Callable[[Indices], Fetched]:
    """The batch's items at once on the item threads (``window``), each with the worker's
    info and the stats current, and its CPU time measured (items run there concurrently,
    usually I/O)."""
    timed = _timed_item(getitem, stats.stages["fetch"])
    cpu_now = time.thread_time

    def timed_as_worker(item: tuple[Index, list[float], list[float]]) -> Sample:
        index, durations, cpus = item
        set_worker_info(info)
        set_current(stats)
        cpu = cpu_now()
        try:
            return timed(index, durations)
        finally:
            cpus.append(cpu_now() - cpu)
            set_worker_info(None)

    def load(indices: Indices) -> Fetched:
        durations: list[float] = []
        cpus: list[float] = []
        data = window(timed_as_worker, [(i, durations, cpus) for i in indices])
        return data, durations, sum(cpus)

    return load


def _collate_step(
    fetcher: TimedFetcher, stats: LoaderStats, info: WorkerInfo | None, sampling: threading.local
) -> Callable[[Indices, list[Sample] | Sample, float, float | None], Batch]:
    """Collate (hidden from torch's ``get_worker_info()`` on a worker; an error noted as raised
    in ``collate_fn`` for the batch's indices) and pin, each timed; given the thread's CPU time
    when the items were fetched, the collation's CPU time too, and the thread's next CPU sample
    is set."""
    collate_fn, finish = fetcher.collate_fn, fetcher.finish
    collating, pinning = stats.stages["collate"], stats.stages["pin"]
    perf, cpu_now = time.perf_counter, time.thread_time

    def collate(indices: Indices, data: list[Sample] | Sample, fetched: float, cpu_fetched: float | None) -> Batch:
        batch = collate_as_worker(collate_fn, data, indices, info)
        collated = perf()
        if cpu_fetched is not None:
            collating.record_many([collated - fetched], cpu=cpu_now() - cpu_fetched, wall=collated - fetched)
            sampling.next = collated + CPU_SAMPLE_INTERVAL
        else:
            collating.record(collated - fetched)
        if finish is not None:
            batch = finish(batch)
            pinning.record(perf() - collated)
        return batch

    return collate


def timed_many(getitems: GetItems, indices: Indices, fetch: Stage, *, count_errors: bool = True) -> list[Sample]:
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
