"""How one batch is loaded: the same steps as torch's fetchers, run on the loader's threads."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torch.utils.data import Dataset

from torch_threadloader.worker_info import hidden_from_torch, make_worker_info, set_worker_info

__all__ = [
    "AsyncMapFetcher",
    "EpochWorkers",
    "IterableWorkerStream",
    "MapFetcher",
    "is_async_dataset",
]


def is_async_dataset(dataset: object) -> bool:
    """True when the dataset's ``__getitem__`` or ``__getitems__`` is a coroutine function."""
    cls = type(dataset)
    return any(inspect.iscoroutinefunction(getattr(cls, name, None)) for name in ("__getitem__", "__getitems__"))


class EpochWorkers:
    """Worker identity for one epoch: the first batch a thread loads in the epoch gives it a
    worker id, its :class:`~torch.utils.data.WorkerInfo` (seed ``base_seed + id``, as torch
    derives it) and runs ``worker_init_fn(id)`` on that thread, once."""

    def __init__(
        self,
        dataset: Dataset[Any],
        num_workers: int,
        base_seed: int,
        worker_init_fn: Callable[[int], object] | None,
    ) -> None:
        self.dataset = dataset
        self.num_workers = num_workers
        self.base_seed = base_seed
        self.worker_init_fn = worker_init_fn
        self._lock = threading.Lock()
        self._next_id = 0
        self._local = threading.local()

    def enter(self, worker_id: int | None = None) -> None:
        """Make the calling thread a worker of this epoch: with ``worker_id`` None, the next
        free id, once per thread (map-style); with an id, that worker's identity, every call
        (an IterableDataset stream, whose thread may have served a stream that ended)."""
        if worker_id is None:
            if getattr(self._local, "joined", False):
                return
            self._local.joined = True
            with self._lock:
                worker_id = self._next_id % self.num_workers
                self._next_id += 1
        set_worker_info(make_worker_info(worker_id, self.num_workers, self.base_seed + worker_id, self.dataset))
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)


class MapFetcher:
    """Loads one batch of a map-style dataset exactly as torch's ``_MapDatasetFetcher``:
    ``__getitems__(indices)`` when the dataset defines it, else ``[dataset[i] for i in indices]``
    (``item_concurrency`` of them at once on ``items_executor``), then ``collate_fn``.
    Without auto-collation the index is a single key and ``collate_fn`` converts one item."""

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        auto_collation: bool,
        collate_fn: Callable[[Any], Any],
        item_concurrency: int,
        items_executor: Callable[[], ThreadPoolExecutor] | None,
        workers: EpochWorkers | None,
        return_indices: bool,
    ) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.item_concurrency = item_concurrency
        self.items_executor = items_executor
        self.workers = workers
        self.return_indices = return_indices
        getitems = getattr(dataset, "__getitems__", None)
        self._getitems: Callable[[Any], Any] | None = getitems if getitems else None

    def fetch(self, index: Any) -> Any:
        if not self.auto_collation:
            return self.dataset[index]
        if self._getitems is not None:
            return self._getitems(index)
        if self.item_concurrency > 1 and self.items_executor is not None and len(index) > 1:
            return _map_window(self.items_executor(), self.dataset.__getitem__, index, self.item_concurrency)
        dataset = self.dataset
        return [dataset[i] for i in index]

    def plain(self) -> Callable[[Any], Any]:
        """This fetcher as one function with nothing to look up per batch, for the common
        case (caller's thread, one item at a time, per-item ``__getitem__``, no indices
        returned); otherwise the fetcher itself."""
        if (
            self.workers is not None
            or self.return_indices
            or self._getitems is not None
            or self.item_concurrency > 1
            or not self.auto_collation
        ):
            return self
        getitem, collate = self.dataset.__getitem__, self.collate_fn

        def load(indices: Any) -> Any:
            return collate([getitem(i) for i in indices])

        return load

    def __call__(self, index: Any) -> Any:
        if self.workers is None:  # the caller's thread: no worker info to hide
            batch = self.collate_fn(self.fetch(index))
        else:
            self.workers.enter()
            data = self.fetch(index)
            with hidden_from_torch():
                batch = self.collate_fn(data)
        return (index, batch) if self.return_indices else batch


def _map_window(executor: ThreadPoolExecutor, fn: Callable[[Any], Any], keys: Sequence[Any], limit: int) -> list[Any]:
    """``[fn(k) for k in keys]`` with at most ``limit`` calls in flight, in order; on the first
    error the calls not yet started are cancelled and the error is raised."""
    results: list[Any] = []
    window: deque[Future[Any]] = deque()
    keys_iter = iter(keys)
    try:
        for key in itertools.islice(keys_iter, limit):
            window.append(executor.submit(fn, key))
        while window:
            results.append(window.popleft().result())
            for key in itertools.islice(keys_iter, 1):
                window.append(executor.submit(fn, key))
    finally:
        for future in window:
            future.cancel()
    return results


class AsyncMapFetcher:
    """Loads one batch of an async map-style dataset on the event loop: ``await
    __getitems__(indices)`` when it is async, else ``await dataset[i]`` for each index with at
    most ``item_concurrency`` in flight. On the first error the batch's other coroutines are
    cancelled and awaited, and that error is raised. Collation happens after, off the loop."""

    def __init__(self, dataset: Dataset[Any], *, auto_collation: bool, item_concurrency: int) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.item_concurrency = item_concurrency
        getitems = getattr(dataset, "__getitems__", None)
        self._getitems = getitems if inspect.iscoroutinefunction(getitems) else None

    async def __call__(self, index: Any) -> tuple[Any, Any]:
        if not self.auto_collation:
            return index, await self.dataset[index]
        if self._getitems is not None:
            return index, await self._getitems(index)
        return index, await _gather_window(index, self.dataset, self.item_concurrency)


async def _gather_window(keys: Sequence[Any], dataset: Any, limit: int) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(key: Any) -> Any:
        async with semaphore:
            return await dataset[key]

    tasks = [asyncio.ensure_future(one(key)) for key in keys]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:  # the first failure in index order
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class IterableWorkerStream:
    """The batches of one worker thread of an ``IterableDataset``, as torch's
    ``_IterableDatasetFetcher`` makes them in one worker process: the first ``next()`` (on the
    worker's thread) sets the thread's worker info, runs ``worker_init_fn`` and calls
    ``iter(dataset)``; each ``next()`` then collates up to ``batch_size`` items (ending on an
    empty or, with ``drop_last``, a short batch), or converts one item without batching."""

    def __init__(
        self,
        dataset: Any,
        worker_id: int,
        workers: EpochWorkers | None,
        *,
        batch_size: int | None,
        drop_last: bool,
        collate_fn: Callable[[Any], Any],
    ) -> None:
        self.dataset = dataset
        self.worker_id = worker_id
        self.workers = workers
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self._it: Iterator[Any] | None = None
        self._ended = False

    def __iter__(self) -> IterableWorkerStream:
        return self

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        if self._it is None:
            if self.workers is not None:
                self.workers.enter(self.worker_id)
            self._it = iter(self.dataset)
        if self.batch_size is None:
            try:
                item = next(self._it)
            except StopIteration:
                self._ended = True
                raise
            return self._collate(item)
        data = []
        for _ in range(self.batch_size):
            try:
                data.append(next(self._it))
            except StopIteration:
                self._ended = True
                break
        if not data or (self.drop_last and len(data) < self.batch_size):
            self._ended = True
            raise StopIteration
        return self._collate(data)

    def _collate(self, data: Any) -> Any:
        if self.workers is None:
            return self.collate_fn(data)
        with hidden_from_torch():
            return self.collate_fn(data)

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        self._ended = True
