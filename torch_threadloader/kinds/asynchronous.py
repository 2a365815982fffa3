"""Async map-style datasets (``async def __getitem__``/``__getitems__``): ``AsyncFetcher`` on an
event-loop thread, batch ``i`` as worker ``i % N``. Items are the unit of concurrency:
``max(N, 1) * prefetch_factor`` batches loading or ready, their items sharing ``max(N, 1) *
item_concurrency`` slots in the epoch's order (an async ``__getitems__``: ``max(N, 1)`` calls
at once). Each batch is collated (and pinned) on the loop, a worker's batches in its order, as
torch's worker collates, so ``next()`` only hands it over."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.fetch import AsyncMapFetcher
from torch_threadloader.fetch.async_fetch import AsyncLoaded
from torch_threadloader.fetch.collate_turns import CollateTurns
from torch_threadloader.fetch.getters import async_batch_getter
from torch_threadloader.kinds import by_cost, stragglers
from torch_threadloader.kinds._shared import resumed
from torch_threadloader.kinds.map_style import MapStyle
from torch_threadloader.kinds.spec import EpochSpec
from torch_threadloader.plan import Kind
from torch_threadloader.random_state import drawing
from torch_threadloader.skip import note_collate
from torch_threadloader.tags import tag_error
from torch_threadloader.userdata import Batch, Indices, UserObject
from torch_threadloader.worker_info import hidden_from_torch

if TYPE_CHECKING:
    from torch_threadloader.resources import Resources

__all__ = ["Async"]


class Async(MapStyle):
    """Items by index, awaited on the loader's event loop; the dataset (and each worker's copy)
    has its ``aclose()`` awaited when the loop closes."""

    kind = Kind.ASYNC
    out_of_order = True  # one loop: a batch may finish before an earlier one, even without workers
    per_item_threads = False
    awaits_items = True
    shares_resources_without_workers = True  # the loader's loop lives on across epochs

    def adopt(self, resources: Resources, dataset: UserObject) -> None:
        resources.async_datasets.append(dataset)

    def on_copy(self, resources: Resources) -> Callable[[UserObject], None] | None:
        return resources.async_datasets.append

    def build(self, spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Batch]:
        resources = spec.resources
        loop = resources.loop()
        if spec.plan.defer_stragglers:  # batches from the samples that finish first
            return stragglers.build_async(spec, loop)
        if spec.plan.max_batch_cost is not None:  # batches cut by cost from the samples in order
            return by_cost.build_async(spec, loop)
        fetch = AsyncMapFetcher(
            spec.dataset,
            auto_collation=spec.auto_collation,
            item_concurrency=spec.plan.item_concurrency,
            workers=spec.workers,
            stats=spec.stats,
            policy=spec.policy,
            worker_of=spec.worker_of,
            item_streams=spec.item_streams,
        )
        collate, finish, return_indices = spec.collate_fn, spec.finish, spec.plan.return_indices

        def collate_pair(tagged: tuple[int, AsyncLoaded], worker: int) -> tuple[int, Batch | tuple[Indices, Batch]]:
            position, pair = tagged
            rng = fetch.rng_of(worker)
            try:
                with hidden_from_torch():  # the batch's worker info is set in its task's context
                    if rng is None:
                        batch = collate(pair[1])
                    else:  # the loading worker's random state, as collate_fn runs in torch's worker
                        with drawing(rng):
                            batch = collate(pair[1])
                if finish is not None:
                    batch = finish(batch)
            except BaseException as exc:
                note_collate(exc, pair[0])
                tag_error(exc, position)
                raise
            return position, ((pair[0], batch) if return_indices else batch)

        turns = CollateTurns()

        async def load(item: tuple[int, Indices]) -> tuple[int, Batch | tuple[Indices, Batch]]:
            position, index = item
            worker = fetch.worker_index(position)
            turn = turns.take(worker)  # as the batch starts: in the epoch's order
            try:
                loaded = await fetch.load_as(worker, position, index)
                await turn.wait()
                return collate_pair(loaded, worker)
            finally:
                turn.done()

        workers = max(spec.num_workers, 1)
        batches = workers * spec.prefetch  # loading or ready
        calls = workers if spec.auto_collation and async_batch_getter(spec.dataset) is not None else batches
        fetched = dp.AsyncFetcher(
            dp.Sampler(sampler=spec.indices, positions=True),
            load,
            max_concurrency=calls,
            max_pending=batches - calls,
            in_order=spec.plan.in_order,
            timeout=spec.timeout,
            stall=spec.stall,
            loop=loop,
            name="threadloader-async",
        )
        return resumed(fetched, spec, 1)
