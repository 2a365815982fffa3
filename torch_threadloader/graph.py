"""The one place where a ThreadLoader's arguments become a ``datapipes`` graph for one epoch.

One function per dataset kind. Every graph ends in a node whose ``next()`` runs in the
caller's thread, so close, timeout, state and pinning exist once, in the nodes:

==================  ===============================  ==========================================
dataset             ``num_workers=0``                ``num_workers=N``
==================  ===============================  ==========================================
map-style           ``Mapper(Sampler, fetch)``       ``ThreadMapper(Sampler, worker_fn, N)``
IterableDataset     ``IterableWrapper(stream)``      ``ThreadMapper(tokens, worker_fn, N)``
async map-style     ``AsyncFetcher → Mapper``        the same, ``max_concurrency=N``
``datapipes`` node  the node                         ``Prefetcher(node, depth=N*prefetch)``
==================  ===============================  ==========================================
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.utils.data import default_collate

import datapipes as dp
from torch_threadloader.batching import fast_batches
from torch_threadloader.budget import ByteBudget
from torch_threadloader.collate import fast_default_collate
from torch_threadloader.fetch import AsyncMapFetcher, IterableWorkerStream, MapFetcher, Workers
from torch_threadloader.intraop import use_one_intraop_thread
from torch_threadloader.pipeline_stats import Stage, timed_iter
from torch_threadloader.resume import is_stateful, sampler_resume, snapshot, tag_error
from torch_threadloader.skip import set_position

if TYPE_CHECKING:
    from torch_threadloader.loader import ThreadLoader

__all__ = ["Resources", "build_graph"]

WORKER_NAME = "threadloader-worker"


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
        self.async_datasets: list[Any] = []  # whose aclose() the loop awaits when it closes
        self.pool_busy = False

    def pool(self, num_threads: int) -> dp.ThreadPool:
        with self.lock:
            if self._pool is None or not self._pool.alive:
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
                self._loop.add_closer(functools.partial(_aclose_all, self.async_datasets))
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


async def _aclose_all(datasets: list[Any]) -> None:
    for dataset in list(datasets):
        aclose = getattr(dataset, "aclose", None)
        if aclose is not None:
            await aclose()
    datasets.clear()


def _init_thread(intraop_default: int, index: int) -> None:
    use_one_intraop_thread(intraop_default)


class EpochSpec:
    """What an epoch's graph is built from: the loader's settings, read once at ``iter()``."""

    def __init__(
        self,
        loader: ThreadLoader[Any],
        resources: Resources,
        workers: Workers | None,
        pin: bool,
        indices: Any,
        resume: dict[str, Any] | None = None,
        budget: ByteBudget | None = None,
        *,
        worker_of: Callable[[int], int] | None = None,
    ) -> None:
        self.loader = loader
        self.budget = budget  # max_bytes_in_flight, for this epoch
        # Map-style and async, in order: the batch at a position goes to worker
        # ``worker_of(position) % num_workers`` (None: the position's own; a worker process
        # numbers its share from 0 and is told the slot of each batch).
        self.worker_of = worker_of
        self.stats = loader._stats  # a LoaderStats when the loader keeps stats
        if self.stats is not None and indices is not None:
            indices = TimedIndices(indices, self.stats.stages["sampling"])
        self.resume = resume  # the part of a loaded state this epoch resumes from
        # An IterableDataset's worker copies' own states to start this epoch from (a state
        # loaded between epochs, where the copies live on: persistent workers), else None.
        self.start_states: list[Any] | None = None
        # A datapipes graph as the dataset: told the graph's state once it is opened.
        self.graph_opened: Callable[[Any], None] | None = None
        # per_sample_rng: (base seed, epoch) that item i draws from, with sample_generator.
        self.sample_rng: tuple[int, int] | None = None
        self.indices = indices  # the epoch's index batches, iterated once (see started_indices)
        self.resources = resources
        self.workers = workers
        self.num_workers = loader.num_workers
        self.prefetch = loader.prefetch_factor if loader.prefetch_factor is not None else 2
        self.timeout = float(loader.timeout) if loader.timeout and loader.num_workers > 0 else None
        self.persistent = loader.persistent_workers and loader.num_workers > 0
        self.auto_collation = loader.batch_sampler is not None
        self.collate_fn = fast_default_collate if loader.collate_fn is default_collate else loader.collate_fn
        self.finish: Callable[[Any], Any] | None = dp.pin_memory if pin else None


def build_graph(spec: EpochSpec, kind: str, pool: dp.ThreadPool | None) -> dp.Node[Any]:
    """The graph of one epoch for a dataset of ``kind`` (``map``, ``iterable``, ``async``, ``node``)."""
    return _BUILDERS[kind](spec, pool)


def _map_style(spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Any]:
    loader = spec.loader
    n = spec.num_workers
    # With workers batches may come out of order: each carries its position, for the checkpoint;
    # a skipped sample's record names its batch's position, also without workers.
    positions = n > 0 or loader._errors.skips
    sampler = dp.Sampler(sampler=spec.indices, positions=positions)
    fetcher = MapFetcher(
        auto_collation=spec.auto_collation,
        collate_fn=spec.collate_fn,
        item_concurrency=loader.item_concurrency,
        items_pool=functools.partial(spec.resources.items, max(n, 1) * loader.item_concurrency),
        return_indices=loader.return_indices,
        finish=spec.finish,
        stats=spec.stats,
        policy=loader._errors,
        budget=spec.budget if n > 0 else None,
        sample_rng=spec.sample_rng,
    )
    if n == 0:
        load = fetcher.plain(loader.dataset)
        if positions:
            load = _with_positions(lambda _worker: load)(0)
        return _resumed(dp.Mapper(sampler, load, name="threadloader"), spec, 1)
    assert spec.workers is not None
    worker_of = _position_of if spec.worker_of is None else _worker_of_position(spec.worker_of)
    return _resumed(
        _workers(spec, pool, sampler, _with_positions(fetcher.for_worker(spec.workers)), worker_of=worker_of),
        spec,
        1,
    )


def _position_of(item: tuple[int, Any]) -> int:
    """Batch ``p`` is worker ``p % num_workers``'s, also in a resumed epoch."""
    return item[0]


def _worker_of_position(worker_of: Callable[[int], int]) -> Callable[[tuple[int, Any]], int]:
    def of(item: tuple[int, Any]) -> int:
        return worker_of(item[0])

    return of


def _with_positions(start: Callable[[int], Callable[[Any], Any]]) -> Callable[[int], Callable[[Any], Any]]:
    """Worker functions that take ``(position, indices)`` and give ``(position, batch)``."""

    def start_worker(worker_id: int) -> Callable[[Any], Any]:
        load = start(worker_id)

        def run(item: tuple[int, Any]) -> tuple[int, Any]:
            position, indices = item
            set_position(position)  # for the record of a sample skipped in this batch
            try:
                return position, load(indices)
            except BaseException as exc:
                tag_error(exc, position)
                raise

        return run

    return start_worker


def _resumed(graph: dp.Node[Any], spec: EpochSpec, depth: int) -> dp.Node[Any]:
    """``graph`` set to resume its Sampler (``depth`` sources down) where ``spec.resume`` says."""
    resume = spec.resume
    if resume is not None:
        state: dict[str, Any] = sampler_resume(resume)
        for _ in range(depth):
            state = {"source": state}
        graph.load_state_dict(state)
    return graph


def _iterable(spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Any]:
    loader = spec.loader
    n = spec.num_workers
    saved = spec.resume["workers"] if spec.resume is not None else [None] * max(n, 1)
    if n == 0:
        return dp.IterableWrapper(
            _Reiterable(lambda: _stream(spec, loader.dataset, False, 0, saved[0])), name="threadloader"
        )
    workers = spec.workers
    assert workers is not None
    # A resumed epoch starts with the worker whose turn was next; thread i is worker i (on a
    # persistent pool, the same thread in every epoch).
    turn = spec.resume["turn"] if spec.resume is not None else 0

    def start(worker_id: int) -> Callable[[Any], Any]:
        return _stream(spec, workers.start(worker_id), True, worker_id, saved[worker_id])

    # torch sends each worker a token per batch (its _InfiniteConstantSampler); a worker whose
    # iterator is exhausted ends its share, and the epoch ends when every worker has.
    return _workers(spec, pool, dp.IterableWrapper(_Tokens()), start, stop_ends_share=True, first_thread=turn)


def _workers(
    spec: EpochSpec,
    pool: dp.ThreadPool | None,
    source: dp.Node[Any],
    start: Callable[[int], Callable[[Any], Any]],
    *,
    stop_ends_share: bool = False,
    worker_of: Callable[[Any], int] | None = None,
    first_thread: int = 0,
) -> dp.Node[Any]:
    """The epoch's ``num_workers`` workers: ``start(i)`` on worker ``i``'s thread gives its function."""
    n = spec.num_workers
    return dp.ThreadMapper(
        source,
        worker_fn=_on_worker_thread(start, spec, pool),
        stop_ends_share=stop_ends_share,
        worker_of=worker_of,
        first_thread=first_thread,
        num_threads=n,
        max_pending=n * (spec.prefetch - 1),
        in_order=spec.loader.in_order,
        timeout=spec.timeout,
        pool=pool,
        name=WORKER_NAME,
    )


def _stream(
    spec: EpochSpec, dataset: Any, worker: bool, worker_id: int, saved: dict[str, Any] | None
) -> IterableWorkerStream:
    """Worker ``worker_id``'s batches of an iterable ``dataset``, each as ``((worker_id,
    state, ended), batch)``: ``state`` is the dataset's own ``state_dict()`` after the batch
    when it has one (``None`` otherwise), ``ended`` whether its iterator ended while the batch
    was made. Resumed from ``saved``: a worker that had ended yields nothing; otherwise the
    dataset loads its state, or the items of the batches the worker delivered are read again
    and dropped."""
    loader = spec.loader
    batch_size = loader.batch_size if spec.auto_collation else None
    skip = 0
    tag: Callable[[IterableWorkerStream], Any]
    if saved is not None and saved.get("ended"):
        dataset = ()
    if is_stateful(dataset):
        start = saved.get("state") if saved is not None else None
        if saved is None and spec.start_states is not None and worker_id < len(spec.start_states):
            start = spec.start_states[worker_id]
        if start is not None:
            dataset.load_state_dict(start)

        def tag(stream: IterableWorkerStream) -> Any:
            return worker_id, snapshot(dataset.state_dict(), dataset), stream.exhausted

    else:
        if saved is not None:
            skip = int(saved["items"]) if "items" in saved else int(saved["batches"]) * (batch_size or 1)

        def tag(stream: IterableWorkerStream) -> Any:
            # The items read from the epoch's start: the stream counts the ones it reads again
            # and drops (``skip``) too, so they are not added again (a second resume lost them).
            return worker_id, None, stream.exhausted, stream.items_read

    return IterableWorkerStream(
        dataset,
        batch_size=batch_size,
        drop_last=loader.drop_last,
        collate_fn=spec.collate_fn,
        finish=spec.finish,
        worker=worker,
        skip_items=skip,
        tag=tag,
        stats=spec.stats,
        count_items=not is_stateful(dataset),
    )


def _async(spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Any]:
    loader = spec.loader
    resources = spec.resources
    loop = resources.loop()
    fetch = AsyncMapFetcher(
        loader.dataset,
        auto_collation=spec.auto_collation,
        item_concurrency=loader.item_concurrency,
        workers=spec.workers,
        stats=spec.stats,
        policy=loader._errors,
        worker_of=spec.worker_of,
    )
    collate, finish, return_indices = spec.collate_fn, spec.finish, loader.return_indices

    def collate_pair(tagged: tuple[int, tuple[Any, Any]]) -> Any:
        position, pair = tagged
        try:
            batch = collate(pair[1])
            if finish is not None:
                batch = finish(batch)
        except BaseException as exc:
            tag_error(exc, position)
            raise
        return position, ((pair[0], batch) if return_indices else batch)

    fetched = dp.AsyncFetcher(
        dp.Sampler(sampler=spec.indices, positions=True),
        fetch,
        max_concurrency=max(spec.num_workers, 1),
        in_order=loader.in_order,
        timeout=spec.timeout,
        loop=loop,
        name="threadloader-async",
    )
    return _resumed(dp.Mapper(fetched, collate_pair, name="threadloader-collate"), spec, 2)


def _node(spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Any]:
    loader = spec.loader
    graph = cast(dp.Node[Any], loader.dataset)
    if spec.resume is not None:
        graph.load_state_dict(spec.resume["graph"])

    def graph_state(stream: IterableWorkerStream) -> Any:  # after each batch, taken where it is made
        # A node's state is plain data of its own (generator states as bytes) plus the items it
        # holds (a Shuffler's buffer), kept as they are.
        return cast(dp.NodeIterator[Any], stream.iterator).state_dict(), stream.exhausted

    def stream() -> IterableWorkerStream:
        loader = spec.loader
        made = IterableWorkerStream(
            graph,
            batch_size=loader.batch_size if spec.auto_collation else None,
            drop_last=loader.drop_last,
            collate_fn=spec.collate_fn,
            finish=spec.finish,
            worker=False,
            tag=graph_state,
            stats=spec.stats,
        )
        if spec.graph_opened is not None:  # opened in graph.open(), before iter(loader) returns
            spec.graph_opened(cast(dp.NodeIterator[Any], made.iterator).state_dict())
        return made

    batches = dp.IterableWrapper(_Reiterable(stream), name="threadloader")
    if spec.num_workers == 0:
        return batches
    # A graph owns its concurrency: it runs once per epoch, ahead of the caller on one thread.
    return dp.Prefetcher(
        batches, depth=spec.num_workers * spec.prefetch, timeout=spec.timeout, pool=pool, name=WORKER_NAME
    )


_BUILDERS: dict[str, Callable[[EpochSpec, dp.ThreadPool | None], dp.Node[Any]]] = {
    "map": _map_style,
    "iterable": _iterable,
    "async": _async,
    "node": _node,
}


def _on_worker_thread(
    start: Callable[[int], Callable[[Any], Any]], spec: EpochSpec, pool: dp.ThreadPool | None
) -> Callable[[int], Callable[[Any], Any]]:
    """A worker's start: its own threads (not a kept pool's) get one intra-op thread first."""
    if pool is not None:
        return start
    default = spec.resources.intraop_default

    def start_here(worker_id: int) -> Callable[[Any], Any]:
        use_one_intraop_thread(default)
        return start(worker_id)

    return start_here


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


class TimedIndices:
    """An epoch's index iterable whose ``next()`` calls are timed as the ``sampling`` stage;
    ``sampler`` and ``len()`` are the wrapped one's."""

    def __init__(self, indices: Any, target: Stage) -> None:
        self.sampler = indices
        self._indices = indices
        self._target = target

    def __iter__(self) -> Any:
        return timed_iter(self._indices, self._target)

    def __len__(self) -> int:
        return len(self._indices)


class _Tokens:
    """An endless stream of ``None``: one per batch asked of the workers."""

    def __iter__(self) -> itertools.repeat[None]:
        return itertools.repeat(None)


class _Reiterable:
    """Calls ``make()`` for each ``iter()``."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make

    def __iter__(self) -> Any:
        return self._make()


def pin_available() -> bool:
    return bool(torch.accelerator.is_available())
