"""ThreadLoader: torch's DataLoader, batch for batch, with threads for workers."""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, default_collate

import datapipes as dp
from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT
from datapipes.thread_mapper import INTERRUPT_JOIN_TIMEOUT
from datapipes._validate import check_positive_int
from torch_threadloader.batching import fast_batches
from torch_threadloader.collate import fast_default_collate
from torch_threadloader.fetch import (
    AsyncMapFetcher,
    EpochWorkers,
    IterableWorkerStream,
    MapFetcher,
    is_async_dataset,
)
from torch_threadloader.intraop import use_one_intraop_thread
from torch_threadloader.worker_info import install_torch_hook

__all__ = ["ThreadLoader"]

T_co = TypeVar("T_co", covariant=True)

install_torch_hook()


class ThreadLoader(DataLoader[T_co]):
    """A :class:`torch.utils.data.DataLoader` whose workers are threads of this process.

    Takes DataLoader's whole signature, with the same defaults and the same errors for
    invalid combinations, and yields the same batches in the same order for the same
    arguments and ``generator`` seed (any order when ``in_order=False``). Differences:

    * ``num_workers`` threads load batches in parallel (0: the caller's thread loads them,
      with no thread and no queue). The threads are started at the first ``iter()`` and kept
      across epochs until :meth:`close`, so later epochs start without creating threads.
    * ``item_concurrency`` (extra): how many items of one batch are fetched at once
      (``dataset[i]`` calls; a dataset with ``__getitems__`` fetches its batch itself).
    * ``return_indices`` (extra): yield ``(indices, batch)`` pairs (map-style datasets).
    * Async datasets (``async def __getitem__`` or ``__getitems__``) run on one event-loop
      thread owned by the loader, up to ``max(num_workers, 1) * item_concurrency`` coroutines
      in flight; the dataset's ``aclose()`` is awaited on :meth:`close`.
    * ``multiprocessing_context`` is refused: there are no worker processes.
    * A :mod:`datapipes` node graph as the dataset is iterated once per epoch (it owns its
      own concurrency); with ``num_workers > 0`` one loader thread runs it ahead.

    Bounds: at most ``max(num_workers, 1) * prefetch_factor`` batches are loading or waiting
    per epoch, whatever their speed (plus up to two in the pinning thread with
    ``pin_memory``). Errors raised by the dataset, ``collate_fn`` or ``worker_init_fn``
    come out of ``next()`` for that batch as the same exception object; the following
    ``next()`` goes on with the next batch. ``timeout`` raises ``TimeoutError`` naming the
    batch. ``break``, ``del`` and garbage collection of an epoch's iterator stop its work.
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
    ) -> None:
        if multiprocessing_context is not None:
            raise ValueError(
                "multiprocessing_context does not apply to ThreadLoader: its workers are threads of this "
                "process, not processes; leave it None (use torch.utils.data.DataLoader for worker processes)"
            )
        check_positive_int("item_concurrency", item_concurrency)
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
        self.return_indices = bool(return_indices)
        self._is_iterable = isinstance(dataset, IterableDataset)
        self._is_async = is_async_dataset(dataset)
        if self.return_indices and self._is_iterable:
            raise ValueError("return_indices=True needs a map-style dataset: an IterableDataset has no indices")
        if self._is_async and self._is_iterable:
            raise ValueError("an IterableDataset with async __getitem__ is not supported; use a map-style dataset")
        if timeout and num_workers == 0:
            raise ValueError("timeout applies to worker threads: pass num_workers > 0, or timeout=0")
        self._resources = _Resources(dataset, self)
        self._finalizer = weakref.finalize(self, self._resources.close)
        self._last_graph: dp.Node[Any] | None = None

    def check_worker_number_rationality(self) -> None:
        """No warning: worker threads waiting on I/O may well outnumber the CPUs."""

    def __iter__(self) -> _ThreadLoaderIter:  # type: ignore[override]
        return _ThreadLoaderIter(self)

    def close(self) -> None:
        """Stop open epochs and the loader's kept threads and event loop (awaiting an async
        dataset's ``aclose()``). Idempotent; also runs on garbage collection and at exit.
        Iterating the loader again afterwards starts new threads."""
        self._resources.close()

    def __enter__(self) -> ThreadLoader[T_co]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """Counters of the most recent epoch's node graph (see ``datapipes.Node.stats``)."""
        graph = self._last_graph
        return graph.stats() if graph is not None else {}


class _Resources:
    """What a loader keeps across epochs: a thread pool, an event-loop thread and an item
    executor, each made on first use, and the epochs still open. Holds no reference to the
    loader. ``close()`` stops them all; the next epoch makes them again."""

    def __init__(self, dataset: Any, loader: ThreadLoader[Any]) -> None:
        self.dataset = dataset
        self.num_workers = loader.num_workers
        self.item_threads = max(loader.num_workers, 1) * loader.item_concurrency
        self.lock = threading.Lock()
        self.pool: dp.ThreadPool | None = None
        self.pool_busy = False
        self.loop: dp.EventLoopThread | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.epochs: weakref.WeakSet[_ThreadLoaderIter] = weakref.WeakSet()
        self.pin_warned = False
        # The creating thread's intra-op thread count: what threads other than ours keep.
        self.intraop_default = torch.get_num_threads()

    def acquire_pool(self) -> dp.ThreadPool | None:
        """The kept pool for one epoch, or None when another epoch still holds it."""
        with self.lock:
            if self.pool_busy:
                return None
            if self.pool is None:
                self.pool = dp.ThreadPool(
                    self.num_workers,
                    name="threadloader-worker",
                    initializer=functools.partial(_init_worker_thread, self.intraop_default),
                )
            self.pool_busy = True
            return self.pool

    def release_pool(self, pool: dp.ThreadPool | None) -> None:
        with self.lock:
            if pool is not None and pool is self.pool:
                self.pool_busy = False

    def event_loop(self) -> dp.EventLoopThread:
        with self.lock:
            if self.loop is None:
                self.loop = dp.EventLoopThread("threadloader-loop")
            return self.loop

    def items_executor(self) -> ThreadPoolExecutor:
        with self.lock:
            if self.executor is None:
                self.executor = ThreadPoolExecutor(
                    self.item_threads,
                    thread_name_prefix="threadloader-item",
                    initializer=use_one_intraop_thread,
                    initargs=(self.intraop_default,),
                )
            return self.executor

    def close(self, *, interrupted: bool = False) -> None:
        """Stop open epochs, then the kept threads. ``interrupted`` (Ctrl-C): wait at most
        half a second for calls in progress, which end on their own, and warn about none."""
        with self.lock:
            epochs = list(self.epochs)
        for epoch in epochs:  # first stop the work that runs on the kept threads
            epoch.close()
        with self.lock:
            pool, loop, executor = self.pool, self.loop, self.executor
            self.pool, self.loop, self.executor = None, None, None
            self.pool_busy = False
        timeout = INTERRUPT_JOIN_TIMEOUT if interrupted else DEFAULT_JOIN_TIMEOUT
        if executor is not None:
            executor.shutdown(wait=not interrupted, cancel_futures=True)
        if pool is not None:
            pool.close(timeout, warn=not interrupted)
        if loop is not None:
            aclose = getattr(self.dataset, "aclose", None)
            try:
                if aclose is not None and not loop.closed:
                    loop.run(aclose(), timeout)
            finally:
                loop.close(timeout)


class _ThreadLoaderIter(Iterator[Any]):
    """One epoch of a ThreadLoader: a datapipes graph (or, with ``num_workers=0``, a plain
    loop in the caller's thread). Closing it (exhaustion, ``close()``, garbage collection)
    stops the epoch's work and hands the kept threads back to the loader."""

    def __init__(self, loader: ThreadLoader[Any]) -> None:
        self._loader = loader
        resources = loader._resources
        self._index_sampler = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
        indices = fast_batches(self._index_sampler)
        auto_collation = loader.batch_sampler is not None
        # torch draws the epoch's base seed at iter(), before the sampler's first draw.
        base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
        num_workers = loader.num_workers
        prefetch = loader.prefetch_factor if loader.prefetch_factor is not None else 2
        self._pool: dp.ThreadPool | None = None
        pin = loader.pin_memory and _pin_available(resources)
        workers = (
            EpochWorkers(loader.dataset, num_workers, base_seed, loader.worker_init_fn) if num_workers > 0 else None
        )
        timeout = float(loader.timeout) if loader.timeout else None
        collate_fn = fast_default_collate if loader.collate_fn is default_collate else loader.collate_fn

        graph: dp.Node[Any] | None = None
        self._plain: Iterator[Any] | None = None
        if loader._is_iterable:
            # A datapipes graph owns its concurrency: it is iterated once, not once per worker.
            is_graph = isinstance(loader.dataset, dp.Node)
            streams = [
                IterableWorkerStream(
                    loader.dataset,
                    worker_id,
                    None if is_graph else workers,
                    batch_size=loader.batch_size if auto_collation else None,
                    drop_last=loader.drop_last,
                    collate_fn=collate_fn,
                )
                for worker_id in range(1 if is_graph else max(num_workers, 1))
            ]
            per_stream = num_workers * prefetch if is_graph else prefetch
            if num_workers == 0:
                self._plain = streams[0]
            else:
                self._pool = resources.acquire_pool()
                graph = _RoundRobin(
                    [
                        dp.ThreadMapper(
                            dp.IterableWrapper(stream),
                            _identity,
                            num_threads=1,
                            max_pending=max(per_stream - 1, 0),
                            timeout=timeout,
                            pool=self._pool,
                            name=f"threadloader-worker-{stream.worker_id}",
                        )
                        for stream in streams
                    ]
                )
        elif loader._is_async:
            fetch = AsyncMapFetcher(loader.dataset, auto_collation=auto_collation, item_concurrency=loader.item_concurrency)
            collate = collate_fn
            return_indices = loader.return_indices
            graph = dp.AsyncFetcher(
                dp.Sampler(sampler=indices),
                fetch,
                max_concurrency=max(num_workers, 1),
                in_order=loader.in_order,
                timeout=timeout,
                loop=resources.event_loop(),
                name="threadloader-async",
            ).collate(lambda pair: (pair[0], collate(pair[1])) if return_indices else collate(pair[1]))
        else:
            fetcher = MapFetcher(
                loader.dataset,
                auto_collation=auto_collation,
                collate_fn=collate_fn,
                item_concurrency=loader.item_concurrency,
                items_executor=resources.items_executor if loader.item_concurrency > 1 else None,
                workers=workers,
                return_indices=loader.return_indices,
            )
            if num_workers == 0:
                self._plain = map(fetcher.plain(), indices)
            else:
                self._pool = resources.acquire_pool()
                graph = dp.ThreadMapper(
                    dp.Sampler(sampler=indices),
                    fetcher,
                    num_threads=num_workers,
                    max_pending=num_workers * max(prefetch - 1, 0),
                    in_order=loader.in_order,
                    timeout=timeout,
                    pool=self._pool,
                    name="threadloader",
                )
        if pin:
            if graph is None:
                assert self._plain is not None
                self._plain = map(dp.pin_memory, self._plain)
            else:
                graph = dp.Prefetcher(graph, depth=1, pin_memory=True)
        loader._last_graph = graph
        self._graph_iter = iter(graph) if graph is not None else None
        source = self._graph_iter if self._graph_iter is not None else self._plain
        assert source is not None
        self._source: Iterator[Any] = source
        self._finalizer = weakref.finalize(self, _close_epoch, self._graph_iter, resources, self._pool)
        with resources.lock:
            resources.epochs.add(self)

    def __iter__(self) -> _ThreadLoaderIter:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._source)
        except StopIteration:
            self.close()
            raise
        except KeyboardInterrupt:
            # Ctrl-C leaves no thread: the epoch and the loader's kept threads stop now (a
            # call in progress ends on its own); the next epoch starts new ones.
            self._loader._resources.close(interrupted=True)
            raise

    def __len__(self) -> int:
        return len(self._index_sampler)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop this epoch's work; the loader keeps its threads for the next epoch."""
        self._finalizer()
        if self._plain is not None:
            close = getattr(self._plain, "close", None)
            if close is not None:
                close()


def _init_worker_thread(intraop_default: int, index: int) -> None:
    use_one_intraop_thread(intraop_default)


def _close_epoch(graph_iter: Any, resources: _Resources, pool: dp.ThreadPool | None) -> None:
    try:
        if graph_iter is not None:
            graph_iter.close()
    finally:
        resources.release_pool(pool)


def _identity(item: Any) -> Any:
    return item


def _pin_available(resources: _Resources) -> bool:
    if torch.accelerator.is_available():
        return True
    with resources.lock:
        warn, resources.pin_warned = not resources.pin_warned, True
    if warn:
        warnings.warn(
            "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used.",
            stacklevel=4,
        )
    return False


class _RoundRobin(dp.Node[Any]):
    """Yields one item from each source in turn, dropping sources as they end: the order in
    which torch's DataLoader returns the batches of its IterableDataset workers."""

    def __init__(self, sources: list[dp.Node[Any]]) -> None:
        super().__init__(None, name="RoundRobin")
        self.sources = sources

    def _open(self, state: dp.StateDict | None) -> dp.NodeIterator[Any]:
        return _RoundRobinIterator([iter(s) for s in self.sources])

    def stats(self) -> dict[str, Any]:
        out = self.node_stats().as_dict()
        out["sources"] = [s.stats() for s in self.sources]
        return out


class _RoundRobinIterator(dp.NodeIterator[Any]):
    def __init__(self, iterators: list[dp.NodeIterator[Any]]) -> None:
        self._all = iterators
        self._active = deque(iterators)

    def __next__(self) -> Any:
        active = self._active
        while active:
            it = active[0]
            try:
                item = next(it)
            except StopIteration:
                active.popleft()
                continue
            except BaseException:
                active.rotate(-1)
                raise
            active.rotate(-1)
            return item
        raise StopIteration

    def state_dict(self) -> dp.StateDict:
        raise NotImplementedError("ThreadLoader over an IterableDataset with workers does not checkpoint yet")

    def close(self) -> None:
        for it in self._all:
            it.close()
        self._active.clear()

