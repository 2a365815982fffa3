"""``defer_stragglers=True``: an epoch's batches cut from the samples that finish first.

The graph (map-style with worker threads, and async)::

    Sampler(FlatIndices(batches), positions=True)    # (sample position, index), the epoch's order
      -> ThreadMapper / AsyncFetcher (in_order=False) # one sample per call: (position, (index, value))
      -> ReadyBatcher(batch_size, window)             # the first batch_size to finish
      -> Mapper(collate)                              # ((positions...), batch) in the caller's thread

The sample order is the batch sampler's batches, flattened: the same draws as torch's, and
with ``drop_last`` the same samples left out (the last ones of the order), so every batch is
full but the last and every rank of a ``DistributedSampler`` gets as many. Each batch carries
the positions of its samples, which the epoch's ledger records (``resume.ledgers.SampleLedger``):
a resumed epoch loads exactly the samples not yet delivered.

Bounds: at most ``capacity`` samples are loading or finished and waiting: the batches'
worth the loader would hold without the mode, ``max(num_workers, 1) * prefetch_factor *
batch_size``, or one per thread (async: per coroutine awaited) if more. Threads: ``num_workers
* item_concurrency`` load at once; async: ``max(num_workers, 1) * item_concurrency``
coroutines are awaited at once, the other samples wait their turn on the loop, which starts
one as another ends (so loading goes on while the caller trains). Plus one partial batch; no
sample ``window`` or more past the oldest one not yet delivered is started
(:class:`datapipes.ReadyBatcher`), so the ledger holds fewer than ``window`` positions past
its frontier.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, TypeAlias, cast

import datapipes as dp
from torch_threadloader.fetch import AsyncMapFetcher, MapFetcher
from torch_threadloader.fetch.getters import Loaded
from torch_threadloader.kinds._shared import _on_worker_thread, resumed
from torch_threadloader.kinds.positive import positive_or_none
from torch_threadloader.kinds.spec import EpochSpec
from torch_threadloader.plan import LoaderPlan
from torch_threadloader.random_state import ItemStreams
from torch_threadloader.resources import WORKER_NAME
from torch_threadloader.skip import note_collate
from torch_threadloader.tags import Positions, tag_error
from torch_threadloader.userdata import Index, Indices, Sample

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs
    from torch_threadloader.kinds.base import KindStrategy
    from torch_threadloader.plan import Settings

__all__ = [
    "FlatIndices",
    "build_async",
    "build_threads",
    "capacity",
    "check_defer_stragglers",
    "check_straggler_window",
    "collate_ready",
    "refusal",
    "running",
    "sample_async",
    "sample_plain",
    "sample_threads",
    "sample_total",
    "window_of",
]

#: A sample loaded, as the workers give it: ``(its position, (its index, its value))``.
Ready: TypeAlias = tuple[int, tuple[Index, Sample]]
#: A batch cut from the samples ready: ``(their positions, the batch)`` (with ``return_indices``,
#: ``(positions, (indices, batch))``).
Cut: TypeAlias = tuple[Positions, Loaded]


def check_defer_stragglers(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"defer_stragglers must be a bool, got {value!r}")
    return value


def check_straggler_window(value: object) -> int | None:
    return positive_or_none(
        value,
        "straggler_window must be an int (samples) or None, got {value!r}",
        "straggler_window must be a positive int (samples), got {value!r}",
    )


def capacity(*, num_workers: int, item_concurrency: int, prefetch: int, batch_size: int, is_async: bool) -> int:
    """The most samples loading or finished and waiting at once (see the module's docstring)."""
    return max(max(num_workers, 1) * prefetch * batch_size, running(num_workers, item_concurrency, is_async))


def running(num_workers: int, item_concurrency: int, is_async: bool) -> int:
    """The most samples loading at once: the threads, or the coroutines awaited."""
    return (max(num_workers, 1) if is_async else num_workers) * item_concurrency


def _capacity_of(plan: LoaderPlan, is_async: bool) -> int:
    assert plan.batch_size is not None
    return capacity(
        num_workers=plan.num_workers,
        item_concurrency=plan.item_concurrency,
        prefetch=plan.prefetch,
        batch_size=plan.batch_size,
        is_async=is_async,
    )


def window_of(plan: LoaderPlan, is_async: bool) -> int:
    """The epoch's window in samples: ``straggler_window``, or ``ReadyBatcher``'s default."""
    assert plan.batch_size is not None
    if plan.straggler_window is not None:
        return plan.straggler_window
    return dp.ReadyBatcher.default_window(_capacity_of(plan, is_async), plan.batch_size)


def refusal(loader: Settings, strategy: KindStrategy, *, skips: bool) -> str | None:
    """Why ``defer_stragglers=True`` does not apply to ``loader`` (its dataset's kind's
    ``strategy``; ``skips``: ``on_error`` replaces a failed sample), or None."""
    if not strategy.kind.uses_sampler:
        return (
            f"a dataset of kind {strategy.kind.value!r}: its samples have no index to dispatch one by one (an IterableDataset's "
            "come from its iterator, a datapipes graph owns its order); use a map-style dataset"
        )
    refusals = (
        (
            strategy.per_item_threads and loader.num_workers == 0,
            "num_workers=0: without worker threads every sample is loaded in turn in next(); set num_workers",
        ),
        (
            loader.batch_size is None,
            "batches cut by a batch_sampler (or batch_size=None): the loader cuts each batch from the samples "
            "ready, so the batches cannot be the batch_sampler's; give sampler= and batch_size= instead",
        ),
        (
            bool(loader.worker_processes),
            "worker_processes: the samples are dispatched by the threads of this process; leave worker_processes=0",
        ),
        (
            skips,
            f"on_error={loader.on_error!r}: a failed sample is raised at its place; leave on_error='raise'",
        ),
        (
            loader.max_bytes_in_flight is not None,
            "max_bytes_in_flight: the window and the prefetch bound what is loaded; leave it None",
        ),
    )
    return next((why for refused, why in refusals if refused), None)


def check_window(loader: Settings, strategy: KindStrategy) -> None:
    """Refuse a ``straggler_window`` below the least the loader's settings allow."""
    window, batch_size = loader.straggler_window, loader.batch_size
    if window is None or batch_size is None:  # no batch_size: refused by refusal()
        return
    prefetch = loader.prefetch_factor if loader.prefetch_factor is not None else 2
    held = capacity(
        num_workers=loader.num_workers,
        item_concurrency=loader.item_concurrency,
        prefetch=prefetch,
        batch_size=batch_size,
        is_async=strategy.awaits_items,
    )
    least = dp.ReadyBatcher.min_window(held, batch_size)
    if window < least:
        raise ValueError(
            f"straggler_window={window} is too small: up to {held} samples are in flight and a batch is "
            f"{loader.batch_size}, so the window must be at least {least} samples"
        )


def sample_total(inputs: EpochInputs) -> int | None:
    """The samples of an epoch in the mode (``drop_last``: the full batches'), None if unsized."""
    batch_size = inputs.plan.batch_size
    if batch_size is None:  # refused by refusal()
        return None
    try:
        batches = len(cast(Sized, inputs.batch_sampler))
        samples = len(cast(Sized, inputs.sampler))
    except TypeError:
        return None
    return batches * batch_size if inputs.plan.drop_last else samples


class FlatIndices:
    """The epoch's index batches, flattened into its sample order. ``sampler`` is the batches'
    iterable (so the sampler's generator is found for checkpoints); iterated once."""

    def __init__(self, batches: Iterable[Indices]) -> None:
        self.sampler = batches

    def __iter__(self) -> Iterator[Index]:
        return itertools.chain.from_iterable(iter(self.sampler))


def collate_ready(spec: EpochSpec) -> Callable[[list[Ready]], Cut]:
    """A ready batch ``[(position, (index, value)), ...]`` as ``(positions, batch)``."""
    collate, finish, return_indices = spec.collate_fn, spec.finish, spec.plan.return_indices

    def collate_cut(ready: list[Ready]) -> Cut:
        positions = tuple(position for position, _ in ready)
        try:
            batch = collate([pair[1] for _, pair in ready])
            if finish is not None:
                batch = finish(batch)
        except BaseException as exc:
            note_collate(exc, [pair[0] for _, pair in ready])
            tag_error(exc, positions)
            raise
        return positions, (([pair[0] for _, pair in ready], batch) if return_indices else batch)

    return collate_cut


def _batched(spec: EpochSpec, fetched: dp.ThreadMapper[Ready] | dp.AsyncFetcher[Ready], is_async: bool) -> dp.Node[Cut]:
    plan = spec.plan
    assert plan.batch_size is not None
    ready = dp.ReadyBatcher(
        fetched, plan.batch_size, window=window_of(plan, is_async), drop_last=plan.drop_last, name="threadloader-ready"
    )
    return resumed(dp.Mapper(ready, collate_ready(spec), name="threadloader-collate"), spec, 3)


def _identity(value: Sample) -> Sample:
    return value


def _sample_fetcher(spec: EpochSpec, item_streams: ItemStreams | None) -> MapFetcher:
    """A fetcher of one sample per call (no collation)."""
    return MapFetcher(
        auto_collation=False,
        collate_fn=_identity,
        item_concurrency=1,
        items_pool=None,
        return_indices=False,
        finish=None,
        stats=spec.stats,
        sample_rng=spec.sample_rng,
        item_streams=item_streams,
    )


def _tagged(load: Callable[[Index], Sample]) -> Callable[[tuple[int, Index]], Ready]:
    """``load`` of one sample, taking and giving its position; an error tagged with it."""

    def run(item: tuple[int, Index]) -> Ready:
        position, index = item
        try:
            return position, (index, load(index))
        except BaseException as exc:
            tag_error(exc, (position,))
            raise

    return run


def sample_plain(spec: EpochSpec) -> dp.Mapper[Ready]:
    """A map-style epoch's samples (:data:`Ready`), in the epoch's order, each loaded in the
    caller's thread as its ``next()`` needs it (``num_workers=0``)."""
    assert spec.indices is not None
    samples = dp.Sampler(sampler=FlatIndices(spec.indices), positions=True)
    return dp.Mapper(samples, _tagged(_sample_fetcher(spec, None).plain(spec.dataset)), name="threadloader")


def build_threads(spec: EpochSpec, pool: dp.ThreadPool | None, *, feed_on_consumer: bool) -> dp.Node[Cut]:
    """A map-style epoch's graph: the samples as they finish (:func:`sample_threads`), batched."""
    return _batched(spec, sample_threads(spec, pool, feed_on_consumer=feed_on_consumer, in_order=False), False)


def sample_threads(
    spec: EpochSpec, pool: dp.ThreadPool | None, *, feed_on_consumer: bool, in_order: bool
) -> dp.ThreadMapper[Ready]:
    """A map-style epoch's samples, loaded one per call (:data:`Ready`): ``num_workers *
    item_concurrency`` threads, thread ``t`` loading for worker ``t % num_workers`` (its dataset
    copy and ``WorkerInfo``), up to ``capacity`` samples held; in the epoch's order if ``in_order``."""
    plan, workers, indices = spec.plan, spec.workers, spec.indices
    assert workers is not None and plan.batch_size is not None and indices is not None
    n = spec.num_workers
    threads = n * plan.item_concurrency
    # a worker's samples load on several threads, as they come: each its own random state
    start_worker = _sample_fetcher(spec, spec.item_streams).for_worker(workers)

    def start(thread: int) -> Callable[[tuple[int, Index]], Ready]:
        return _tagged(start_worker(thread % n))

    pool = pool if pool is not None and pool.num_threads >= threads else None
    held = _capacity_of(plan, False)
    samples = dp.Sampler(sampler=FlatIndices(indices), positions=True)
    return dp.ThreadMapper(
        samples,
        worker_fn=_on_worker_thread(start, spec, pool),
        num_threads=threads,
        max_pending=held - threads,
        in_order=in_order,
        timeout=spec.timeout,
        stall=spec.stall,
        pool=pool,
        name=WORKER_NAME,
        feed_on_consumer=feed_on_consumer,
    )


def build_async(spec: EpochSpec, loop: dp.EventLoopThread) -> dp.Node[Cut]:
    """An async epoch's graph: the samples as they finish (:func:`sample_async`), batched."""
    return _batched(spec, sample_async(spec, loop, in_order=False), True)


def sample_async(spec: EpochSpec, loop: dp.EventLoopThread, *, in_order: bool) -> dp.AsyncFetcher[Ready]:
    """An async epoch's samples (:data:`Ready`): ``max(num_workers, 1) * item_concurrency``
    awaited at once, up to ``capacity`` in the graph, sample ``p`` by worker ``p % num_workers``;
    in the epoch's order if ``in_order``."""
    fetch = AsyncMapFetcher(
        spec.dataset,
        auto_collation=False,
        item_concurrency=spec.plan.item_concurrency,  # its slots: the samples awaited, as bounded below
        workers=spec.workers,
        stats=spec.stats,
        item_streams=spec.item_streams,
    )
    plan, indices = spec.plan, spec.indices
    assert indices is not None  # map-style: the epoch's index batches
    awaited = running(plan.num_workers, plan.item_concurrency, True)
    samples = dp.Sampler(sampler=FlatIndices(indices), positions=True)
    return dp.AsyncFetcher(
        samples,
        fetch,
        max_concurrency=awaited,
        max_pending=_capacity_of(plan, True) - awaited,
        in_order=in_order,
        timeout=spec.timeout,
        stall=spec.stall,
        loop=loop,
        name="threadloader-async",
    )
