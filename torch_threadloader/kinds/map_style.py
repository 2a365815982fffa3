"""Map-style datasets with a sync ``__getitem__``: ``Mapper(Sampler, fetch)`` without workers,
``ThreadMapper(Sampler, worker_fn, N)`` with them (batch ``p`` on worker ``p % N``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.batching import pulls_anywhere
from torch_threadloader.fetch import MapFetcher
from torch_threadloader.fetch.getters import Load, Loaded
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
        )
        if spec.plan.max_batch_cost is not None and n == 0:  # batches cut by cost, samples loaded here
            return by_cost.build_plain(spec)
        if n == 0:
            load = fetcher.plain(spec.dataset)
            if positions:
                return resumed(
                    dp.Mapper(sampler, with_positions(lambda _worker: load)(0), name="threadloader"), spec, 1
                )
            return resumed(dp.Mapper(sampler, load, name="threadloader"), spec, 1)
        assert spec.workers is not None
        # A user's sampler is pulled in next(), where torch pulls it (batching.pulls_anywhere).
        inline = not pulls_anywhere(spec.inputs)
        if spec.plan.defer_stragglers:  # batches from the samples that finish first
            return stragglers.build_threads(spec, pool, feed_on_consumer=inline)
        if spec.plan.max_batch_cost is not None:  # batches cut by cost from the samples in order
            return by_cost.build_threads(spec, pool, feed_on_consumer=inline)
        worker_of = _position_of if spec.worker_of is None else _worker_of_position(spec.worker_of)
        start = with_positions(fetcher.for_worker(spec.workers))
        graph = thread_workers(spec, pool, sampler, start, worker_of=worker_of, feed_on_consumer=inline)
        return resumed(graph, spec, 1)

    def own_state(self, dataset: UserObject) -> dp.StateDict:
        return {"dataset": dataset.state_dict()} if is_stateful(dataset) else {}

    def restore(self, dataset: UserObject, plan: LoaderPlan, local: dp.StateDict) -> None:
        if is_stateful(dataset) and local.get("dataset") is not None:
            dataset.load_state_dict(local["dataset"])


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
