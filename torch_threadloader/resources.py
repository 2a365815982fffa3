"""What an epoch runs on and what a loader keeps across epochs: :class:`Resources` (the worker
pool, the item pool and the event loop, made on first use and closed together) and
:class:`Kept` (the resources of persistent workers and of an async dataset's loop, the base seed,
the worker processes and the open epochs' runs). Neither holds a reference to the loader."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import datapipes as dp
from torch_threadloader.intraop import use_one_intraop_thread
from torch_threadloader.userdata import UserObject

if TYPE_CHECKING:
    from torch_threadloader.fetch.workers import Workers

__all__ = ["WORKER_NAME", "AsyncDatasets", "Kept", "OpenRun", "Resources"]

#: The name of the loader's worker threads (``threading.Thread.name``).
WORKER_NAME = "threadloader-worker"


class OpenRun(Protocol):
    """An open epoch's run as :class:`Kept` holds it (``torch_threadloader.epoch.EpochRun``)."""

    opening: bool

    def close(self, timeout: float | None, *, warn: bool) -> None: ...


class Resources:
    """Threads made on first use and closed together: the worker pool, the item pool and the
    event loop. An epoch with ``persistent_workers=False`` owns one; the loader owns one for
    persistent workers. Holds no reference to the loader. ``close()`` stops them within one
    bound; in a forked child it only forgets them (their threads stayed in the parent)."""

    def __init__(self, dataset: UserObject, intraop_default: int) -> None:
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
        """The item pool, made at the first call (or anew in a forked child). One closed
        meanwhile (the exit hook closes pools before the runs that use them) is returned as it
        is, so a worker's next batch fails instead of starting threads nobody will stop."""
        with self.lock:
            if self._items is None or (not self._items.alive and os.getpid() != self.pid):
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
        self._datasets: list[UserObject] = []

    def append(self, dataset: UserObject) -> None:
        """Add ``dataset`` unless it is there already."""
        with self._lock:
            if not any(d is dataset for d in self._datasets):
                self._datasets.append(dataset)

    def __iter__(self) -> Iterator[UserObject]:
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


async def _aclose_each(datasets: list[UserObject]) -> None:
    for dataset in datasets:
        aclose: Callable[[], Awaitable[object]] | None = getattr(dataset, "aclose", None)
        if aclose is not None:
            await aclose()


def _init_thread(intraop_default: int, index: int) -> None:
    use_one_intraop_thread(intraop_default)


class Kept:
    """What a loader keeps across epochs: with persistent workers their pool, workers and base
    seed; an event loop for async datasets without workers; the open epochs' runs. Holds no
    reference to the loader, so the loader's finalizer can close it.

    ``epochs`` is a plain set, read and changed only under ``lock``: an epoch's run is added
    when it opens and removed when it closes (by its epoch, its finalizer or :meth:`close`), so
    no entry goes away behind the lock (a ``WeakSet`` loses entries to the collector on any
    thread, and copying it while it changes fails without the GIL)."""

    def __init__(self, dataset: UserObject, intraop_default: int) -> None:
        self.resources = Resources(dataset, intraop_default)
        self.lock = threading.Lock()
        self.epochs: set[OpenRun] = set()
        self.base_seed: int | None = None
        self.pin_warned = False
        self.processes: Any = None  # worker_processes > 0: the loader's WorkerProcesses, made at the first iter()

    def after_fork(self) -> None:
        """In a forked child: forget the parent's threads and epochs (they are not here)."""
        if self.resources.pid != os.getpid():
            self.resources.forget_after_fork()
            with self.lock:
                self.epochs.clear()

    def add(self, run: OpenRun) -> None:
        """``run`` opens its graph now (see ``EpochRun.opened``)."""
        with self.lock:
            self.epochs.add(run)
            run.opening = True

    def close(self, timeout: float | None, *, interrupted: bool = False) -> None:
        """Close the open epochs, then the kept threads and processes, within ``timeout`` in all."""
        with self.lock:
            epochs = list(self.epochs)
            self.epochs.clear()
            self.base_seed = None
        deadline = dp.Deadline(timeout)
        for epoch in epochs:  # first stop the work that runs on the kept threads
            epoch.close(deadline.remaining(), warn=not interrupted)
        self.resources.close(deadline.remaining(), warn=not interrupted)
        self.resources.workers = None
        with self.lock:
            processes, self.processes = self.processes, None
        if processes is not None:
            processes.close(deadline.remaining(), warn=not interrupted)
