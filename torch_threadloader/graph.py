"""What an epoch runs on, shared by its parts: :class:`Resources` (the worker pool, the item
pool and the event loop, made on first use and closed together), the epoch's started index
iterator (:func:`started_indices`), and, for code that imports them from here, the kinds'
:class:`~torch_threadloader.kinds.EpochSpec` and :func:`~torch_threadloader.kinds.build_graph`."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import torch

import datapipes as dp
from torch_threadloader.batching import fast_batches
from torch_threadloader.fetch import Workers
from torch_threadloader.intraop import use_one_intraop_thread
from torch_threadloader.kinds import WORKER_NAME, EpochSpec, TimedIndices, build_graph

if TYPE_CHECKING:
    from torch_threadloader.loader import ThreadLoader

__all__ = [
    "AsyncDatasets",
    "EpochSpec",
    "Resources",
    "StartedIndices",
    "TimedIndices",
    "build_graph",
    "pin_available",
    "started_indices",
]


class Resources:
    """Threads made on first use and closed together: the worker pool, the item pool and the
    event loop. An epoch with ``persistent_workers=False`` owns one; the loader owns one for
    persistent workers. Holds no reference to the loader. ``close()`` stops them within one
    bound; in a forked child it only forgets them (their threads stayed in the parent)."""

    def __init__(self, dataset: Any, intraop_default: int) -> None:
        self.dataset = dataset
        self.intraop_default = intraop_default
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self._pool: dp.ThreadPool | None = None
        self._items: dp.ThreadPool | None = None
        self._loop: dp.EventLoopThread | None = None
        self.workers: Workers | None = None  # kept by the loader with persistent workers
        self.async_datasets = AsyncDatasets()  # whose aclose() the loop awaits when it closes
        self.pool_busy = False

    def pool(self, num_threads: int) -> dp.ThreadPool:
        with self.lock:
            old = self._pool
            if old is not None and old.alive and old.num_threads != num_threads:
                old.close(0, warn=False)  # num_workers was set since: idle, its threads end now
            if self._pool is None or not self._pool.alive or self._pool.num_threads != num_threads:
                # Pinned: persistent worker i runs on thread i in every epoch (its thread-locals stay its own).
                self._pool = dp.ThreadPool(
                    num_threads,
                    name=WORKER_NAME,
                    initializer=functools.partial(_init_thread, self.intraop_default),
                    pinned=True,
                )
            return self._pool

    def items(self, num_threads: int) -> dp.ThreadPool:
        with self.lock:
            if self._items is None or not self._items.alive:
                self._items = dp.ThreadPool(
                    num_threads,
                    name="threadloader-item",
                    initializer=functools.partial(_init_thread, self.intraop_default),
                )
            return self._items

    def loop(self) -> dp.EventLoopThread:
        with self.lock:
            if self._loop is None or self._loop.closed:
                self._loop = dp.EventLoopThread("threadloader-loop")
                # Awaited however the loop closes: close(), collection or interpreter exit.
                self._loop.add_closer(self.async_datasets.aclose_all)
            return self._loop

    def release_pool(self, pool: dp.ThreadPool, *, reusable: bool) -> None:
        """An epoch is done with ``pool``. Not ``reusable`` (a call still running on one of
        its threads): the pool is let go, its threads end when their calls return."""
        with self.lock:
            if pool is not self._pool:
                return
            self.pool_busy = False
            if reusable:
                return
            self._pool = None
        pool.close(0, warn=False)

    def forget_after_fork(self) -> None:
        """In a forked child: drop what the parent's threads ran (they are not here)."""
        with self.lock:
            self._pool = self._items = self._loop = None
            self.workers = None
            self.pool_busy = False
        self.pid = os.getpid()

    def close(self, timeout: float | None, *, warn: bool = True) -> None:
        """Stop the threads within ``timeout`` seconds in all, awaiting ``aclose()`` first."""
        if self.pid != os.getpid():
            self.forget_after_fork()
            return
        with self.lock:
            pool, items, loop = self._pool, self._items, self._loop
            self._pool = self._items = self._loop = None
            self.pool_busy = False
        deadline = dp.Deadline(timeout)
        if items is not None:
            items.close(deadline.remaining(), warn=warn)
        if pool is not None:
            pool.close(deadline.remaining(), warn=warn)
        if loop is not None:
            loop.close(deadline.remaining(), warn=warn)


class AsyncDatasets:
    """The async datasets (the loader's, each worker's copy) whose ``aclose()`` a loop awaits
    when it closes: each once, however many epochs or threads add it (identity, under a lock:
    two epochs starting at once on two threads add the loader's dataset once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._datasets: list[Any] = []

    def append(self, dataset: Any) -> None:
        """Add ``dataset`` unless it is there already."""
        with self._lock:
            if not any(d is dataset for d in self._datasets):
                self._datasets.append(dataset)

    def __iter__(self) -> Any:
        with self._lock:
            return iter(list(self._datasets))

    def __len__(self) -> int:
        with self._lock:
            return len(self._datasets)

    def aclose_all(self) -> Awaitable[None]:
        """Await each dataset's ``aclose()`` (on the loop), and forget them."""
        with self._lock:
            datasets, self._datasets = self._datasets, []
        return _aclose_each(datasets)


async def _aclose_each(datasets: list[Any]) -> None:
    for dataset in datasets:
        aclose: Callable[[], Awaitable[Any]] | None = getattr(dataset, "aclose", None)
        if aclose is not None:
            await aclose()


def _init_thread(intraop_default: int, index: int) -> None:
    use_one_intraop_thread(intraop_default)


def started_indices(loader: ThreadLoader[Any]) -> StartedIndices:
    """``iter()`` of the loader's index sampler, called now: torch calls it at ``iter(loader)``,
    before it draws the base seed, so a sampler whose ``__iter__`` draws at once draws first."""
    index_sampler = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    source = fast_batches(index_sampler)
    return StartedIndices(source, iter(source))


class StartedIndices:
    """An index sampler's iterator, already made, as a one-epoch iterable: ``sampler`` (for a
    checkpoint to find the sampler's generator) and ``len()`` are the sampler's."""

    def __init__(self, sampler: Any, iterator: Any) -> None:
        self.sampler = sampler
        self._iterator = iterator

    def __iter__(self) -> Any:
        iterator, self._iterator = self._iterator, None
        if iterator is None:
            raise RuntimeError("an epoch's index iterator is iterated once")
        return iterator

    def __len__(self) -> int:
        return len(self.sampler)

    def started(self) -> bool:
        """Whether the epoch has taken the iterator (its sampler's order is being drawn)."""
        return self._iterator is None


def pin_available() -> bool:
    return bool(torch.accelerator.is_available())
