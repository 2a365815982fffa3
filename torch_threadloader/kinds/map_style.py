"""Map-style datasets with a sync ``__getitem__``: ``Mapper(Sampler, fetch)`` without workers,
``ThreadMapper(Sampler, worker_fn, N)`` with them (batch ``p`` on worker ``p % N``); with
``item_concurrency > 1``, items are the unit: ``N * prefetch_factor`` batch threads sharing
``N * item_concurrency`` item slots (:class:`~torch_threadloader.fetch.shared_items.SharedItems`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.batching import pulls_anywhere
from torch_threadloader.fetch import MapFetcher
from torch_threadloader.fetch.getters import Load, Loaded, batch_getter
from torch_threadloader.fetch.map_fetcher import as_worker
from torch_threadloader.fetch.shared_items import SharedItems
from torch_threadloader.kinds import by_cost, stragglers
from torch_threadloader.kinds._shared import resumed, thread_workers
from torch_threadloader.kinds.base import KindStrategy
from torch_threadloader.kinds.spec import EpochSpec
from torch_threadloader.plan import Kind, LoaderPlan
from torch_threadloader.resume import is_stateful
from torch_threadloader.resume.sampled import SampledState
from torch_threadloader.skip import set_position
from torch_threadloader.tags import tag_error
from torch_threadloader.userdata import Batch, Indices, UserObject

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["MapStyle", "with_positions"]


class MapStyle(SampledState, KindStrategy):
    """Items by index from the loader's sampler, fetched in the worker's (or caller's) thread."""

    kind = Kind.MAP
    per_item_threads = True

    def sample_total(self, inputs: EpochInputs) -> int | None:
        return stragglers.sample_total(inputs)

    def build(self, spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Batch]:
        n = spec.num_workers
        # With workers batches may come out of order: each carries its position, for the checkpoint;
        # a skipped sample's record names its batch's position, also without workers.
        positions = n > 0 or spec.plan.skips
        sampler = dp.Sampler(sampler=spec.indices, positions=positions)
        shared = _shared_items(spec)
        fetcher = MapFetcher(
            auto_collation=spec.auto_collation,
            collate_fn=spec.collate_fn,
            item_concurrency=spec.plan.item_concurrency,
            items_pool=functools.partial(spec.resources.items, max(n, 1) * spec.plan.item_concurrency),
            return_indices=spec.plan.return_indices,
            finish=spec.finish,
            stats=spec.stats,
            policy=spec.policy,
            budget=spec.budget if n > 0 else None,
            sample_rng=spec.sample_rng,
            item_streams=spec.item_streams if spec.plan.item_concurrency > 1 else None,
            shared=shared,
        )
        if spec.plan.max_batch_cost is not None and n == 0:  # batches cut by cost, samples loaded here
            return by_cost.build_plain(spec)
        if n == 0:
            return _in_callers_thread(spec, fetcher, sampler, positions=positions)
        assert spec.workers is not None
        # A user's sampler is pulled in next(), where torch pulls it (batching.pulls_anywhere).
        inline = not pulls_anywhere(spec.inputs)
        if spec.plan.defer_stragglers:  # batches from the samples that finish first
            return stragglers.build_threads(spec, pool, feed_on_consumer=inline)
        if spec.plan.max_batch_cost is not None:  # batches cut by cost from the samples in order
            return by_cost.build_threads(spec, pool, feed_on_consumer=inline)
        if shared is not None:  # items as the unit: a thread per batch, the items on shared slots
            return _by_shared_items(spec, fetcher, shared, sampler, pool, feed_on_consumer=inline)
        worker_of = _position_of if spec.worker_of is None else _worker_of_position(spec.worker_of)
        start = with_positions(fetcher.for_worker(spec.workers))
        graph = thread_workers(spec, pool, sampler, start, worker_of=worker_of, feed_on_consumer=inline)
        return resumed(graph, spec, 1)

    def worker_threads(self, plan: LoaderPlan, dataset: UserObject) -> int:
        """Items as the unit: a thread per batch loading or ready (it mostly waits for its items)."""
        return plan.num_workers * plan.prefetch if _items_as_unit(plan, dataset) else plan.num_workers

    def own_state(self, dataset: UserObject) -> dp.StateDict:
        return {"dataset": dataset.state_dict()} if is_stateful(dataset) else {}

    def restore(self, dataset: UserObject, plan: LoaderPlan, local: dp.StateDict) -> None:
        if is_stateful(dataset) and local.get("dataset") is not None:
            dataset.load_state_dict(local["dataset"])


def _in_callers_thread(spec: EpochSpec, fetcher: MapFetcher, sampler: dp.Sampler, *, positions: bool) -> dp.Node[Batch]:
    """Without workers: each batch loaded in ``next()``, tagged with its position when ``positions``."""
    load = fetcher.plain(spec.dataset)
    if positions:
        return resumed(dp.Mapper(sampler, with_positions(lambda _worker: load)(0), name="threadloader"), spec, 1)
    return resumed(dp.Mapper(sampler, load, name="threadloader"), spec, 1)


def _items_as_unit(plan: LoaderPlan, dataset: UserObject) -> bool:
    """Items are the unit of concurrency: worker threads with ``item_concurrency > 1`` loading
    batches by ``__getitem__``, without a byte budget, straggler mode or batches by cost."""
    return (
        plan.num_workers > 0
        and plan.item_concurrency > 1
        and plan.auto_collation
        and not plan.in_processes
        and plan.max_bytes_in_flight is None
        and not plan.defer_stragglers
        and plan.max_batch_cost is None
        and batch_getter(dataset) is None
    )


def _shared_items(spec: EpochSpec) -> SharedItems | None:
    """The epoch's shared items when :func:`_items_as_unit` (not in a worker process's graph)."""
    plan = spec.plan
    if spec.inputs is None or not _items_as_unit(plan, spec.dataset):
        return None
    n, items = spec.num_workers, plan.item_concurrency
    return SharedItems(
        num_workers=n,
        item_concurrency=items,
        prefetch=spec.prefetch,
        items_pool=functools.partial(spec.resources.items, n * items),
        worker_of=spec.worker_of,
    )


def _by_shared_items(
    spec: EpochSpec,
    fetcher: MapFetcher,
    shared: SharedItems,
    sampler: dp.Sampler,
    pool: dp.ThreadPool | None,
    *,
    feed_on_consumer: bool,
) -> dp.Node[Batch]:
    """The epoch's batches on ``num_workers * prefetch_factor`` threads of their own (thread
    ``t`` starts worker ``t % num_workers``; each batch runs as its worker: its dataset copy,
    info and random state), their items on ``shared``'s slots, in the epoch's order."""
    workers = spec.workers
    assert workers is not None

    def start(thread: int) -> Callable[[tuple[int, Indices]], tuple[int, Loaded]]:
        failed: BaseException | None = None
        try:  # worker_init_fn as the epoch starts, once per worker
            workers.start(thread % spec.num_workers)
        except BaseException as exc:  # raised for each of this thread's batches, each still done
            failed = exc
        loads: dict[int, Load] = {}

        def run(item: tuple[int, Indices]) -> tuple[int, Loaded]:
            position, indices = item
            if failed is not None:  # as a worker thread's failed start is raised: untagged
                shared.done(position)
                raise failed
            try:
                worker = shared.worker_of(position)
                dataset = workers.start(worker)  # this thread works for the batch's worker
                load = loads.get(worker)
                if load is None:
                    load = loads[worker] = as_worker(
                        fetcher.for_dataset(dataset, workers.info(worker)), workers.rng(worker)
                    )
                set_position(position)
                return position, load(indices)
            except BaseException as exc:
                tag_error(exc, position)
                raise
            finally:
                shared.done(position)  # its worker's next batch may collate, whatever happened here

        return run

    if spec.stall is not None and spec.inputs is not None:  # a report names the batch's worker, not its thread
        spec.stall = spec.inputs.state.stalls.watch(
            spec.plan.stall_report_after, samples=False, worker_of=lambda item: shared.worker_at(item[0])
        )
    graph = thread_workers(
        spec,
        pool if pool is not None and pool.num_threads == shared.num_threads else None,
        shared.source(sampler),
        start,
        worker_of=lambda item: shared.thread_of(item[0]),
        feed_on_consumer=feed_on_consumer,
        thread_per_batch=True,
    )
    return resumed(graph, spec, 2)


def _position_of(item: tuple[int, Indices]) -> int:
    """Batch ``p`` is worker ``p % num_workers``'s, also in a resumed epoch."""
    return item[0]


def _worker_of_position(worker_of: Callable[[int], int]) -> Callable[[tuple[int, Indices]], int]:
    def of(item: tuple[int, Indices]) -> int:
        return worker_of(item[0])

    return of


def with_positions(
    start: Callable[[int], Load],
) -> Callable[[int], Callable[[tuple[int, Indices]], tuple[int, Loaded]]]:
    """Worker functions that take ``(position, indices)`` and give ``(position, batch)``."""

    def start_worker(worker_id: int) -> Callable[[tuple[int, Indices]], tuple[int, Loaded]]:
        load = start(worker_id)

        def run(item: tuple[int, Indices]) -> tuple[int, Loaded]:
            position, indices = item
            set_position(position)  # for the record of a sample skipped in this batch
            try:
                return position, load(indices)
            except BaseException as exc:
                tag_error(exc, position)
                raise

        return run

    return start_worker
