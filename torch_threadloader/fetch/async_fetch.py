"""Loading one batch of an async map-style dataset on the event loop (``AsyncMapFetcher``),
and ``gather_window``: a batch's coroutines, each holding one of the epoch's item slots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias, TypeVar

from torch_threadloader.fetch.getters import AsyncDataset, async_batch_getter
from torch_threadloader.fetch.item_slots import ItemSlots
from torch_threadloader.fetch.workers import Workers
from torch_threadloader.random_state import Drawn, ItemStreams, WorkerRNG
from torch_threadloader.skip import ErrorPolicy, Failed, note_raised_in, used_indices
from torch_threadloader.stats import LoaderStats, Stage, set_current
from torch_threadloader.tags import tag_error
from torch_threadloader.userdata import Index, Indices, Sample
from torch_threadloader.worker_info import set_worker_info

__all__ = ["AsyncLoaded", "AsyncMapFetcher", "gather_window"]

_T = TypeVar("_T")

#: What :class:`AsyncMapFetcher` loads for a batch: its indices (with a skipping policy, those
#: used) and its samples; without auto-collation, the index and its one sample.
AsyncLoaded: TypeAlias = tuple[Indices, list[Sample] | Sample]


class AsyncMapFetcher:
    """Loads one batch of an async map-style dataset on the event loop: ``await
    __getitems__(indices)`` when it is async, else ``await dataset[i]`` for each index, each
    item holding one of ``slots`` (:class:`ItemSlots`: ``max(num_workers, 1) *
    item_concurrency`` shared by every batch loading; a freed slot goes to the next item in
    the epoch's order). Batch ``i`` of the epoch is loaded by worker
    ``i % num_workers`` (its dataset copy; its ``WorkerInfo`` in the batch's context, so
    ``get_worker_info()`` answers inside the coroutines). On the first error the batch's
    other coroutines are cancelled and awaited, and that error is raised. Collation happens
    after, off the loop. Each item draws from its own random state (``item_streams``: a
    worker's items are awaited at once, so a shared state would give draws in the order of
    the timing). Called with ``(position, indices)``, it gives ``(position, (indices,
    data))``; an error carries its position (:func:`~torch_threadloader.tags.tag_error`)."""

    def __init__(
        self,
        dataset: AsyncDataset,
        *,
        auto_collation: bool,
        item_concurrency: int,
        workers: Workers | None,
        stats: LoaderStats | None = None,
        policy: ErrorPolicy | None = None,
        worker_of: Callable[[int], int] | None = None,
        item_streams: ItemStreams | None = None,
    ) -> None:
        self.item_streams = item_streams
        self.stats = stats
        self.policy = policy if policy is not None and policy.skips else None
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.item_concurrency = item_concurrency
        self.workers = workers
        num_workers = 0 if workers is None else workers.num_workers
        #: The epoch's item slots (the loop thread's only).
        self.slots = ItemSlots(max(num_workers, 1) * item_concurrency)
        self.worker_of = worker_of  # position -> its worker (modulo num_workers); None: the position

    def __call__(self, item: tuple[int, Indices]) -> Awaitable[tuple[int, AsyncLoaded]]:
        position, index = item
        return self.load_as(self.worker_index(position), position, index)

    def worker_index(self, position: int) -> int:
        """The worker that loads the batch at ``position`` (0 without workers). Asks
        ``worker_of`` (which may answer once per position), so call it once per batch."""
        workers = self.workers
        if workers is None:
            return 0
        worker = position if self.worker_of is None else self.worker_of(position)
        return worker % workers.num_workers

    def load_as(self, worker: int, position: int, index: Indices) -> Awaitable[tuple[int, AsyncLoaded]]:
        """The batch at ``position`` loaded by ``worker`` (its :meth:`worker_index`)."""
        return self._tagged(position, self._load(None if self.workers is None else worker, index, position))

    def rng_of(self, worker: int) -> WorkerRNG | None:
        """The random state of ``worker`` (``None`` without workers): what its ``collate_fn``
        draws from, as in the worker's process."""
        workers = self.workers
        return None if workers is None else workers.rng(worker)

    @staticmethod
    async def _tagged(position: int, load: Awaitable[_T]) -> tuple[int, _T]:
        try:
            return position, await load
        except BaseException as exc:
            tag_error(exc, position)
            raise

    async def _load(self, worker_id: int | None, index: Indices, position: int) -> AsyncLoaded:
        """The batch's samples, by worker ``worker_id``'s dataset copy (None: the dataset)."""
        dataset = self.dataset
        if worker_id is not None:
            assert self.workers is not None
            info = self.workers.info(worker_id)  # on the loop thread, in this task's context
            set_worker_info(info)
            dataset = info.dataset
        stats = self.stats
        if stats is not None:
            set_current(stats)
        fetch = stats.stages["fetch"] if stats is not None else None
        streams = self.item_streams
        if not self.auto_collation:
            slots = self.slots
            await slots.acquire((position, 0))
            try:
                return index, await _noted(_timed(_drawn(dataset[index], streams, index), fetch), "__getitem__", index)
            finally:
                slots.release()
        getitems = async_batch_getter(dataset)
        if getitems is not None:
            first = index[0] if len(index) else 0
            return index, await _noted(_timed(_drawn(getitems(index), streams, first), fetch), "__getitems__", index)
        if self.policy is not None:
            outcomes = await _attempt_window(index, dataset, self.slots, position, fetch, streams)
            values = self.policy.settle(index, outcomes, position)
            return used_indices() or index, values
        return index, await gather_window(
            index, dataset, self.slots, fetch, streams, position=position, in_turn=self.item_concurrency == 1
        )


async def _noted(awaitable: Awaitable[_T], stage: str, arg: object) -> _T:
    """``await awaitable``, an error noted as raised in ``stage(arg)``."""
    try:
        return await awaitable
    except Exception as exc:
        note_raised_in(exc, stage, arg)
        raise


def _drawn(awaitable: Awaitable[_T], streams: ItemStreams | None, key: Index) -> Awaitable[_T]:
    """``awaitable`` with the global random calls of its steps acting on item ``key``'s state."""
    return awaitable if streams is None else Drawn(awaitable, streams(key))


def _item(dataset: AsyncDataset, key: Index, fetch: Stage | None, streams: ItemStreams | None) -> Awaitable[Sample]:
    """``dataset[key]``'s awaitable: in the item's random state, timed with ``stats=True`` (no
    layer for what is off: each one costs every step of the item)."""
    awaitable = _drawn(dataset[key], streams, key)
    return awaitable if fetch is None else _timed(awaitable, fetch)


async def _timed(awaitable: Awaitable[_T], fetch: Stage | None) -> _T:
    if fetch is None:
        return await awaitable
    start = time.perf_counter()
    try:
        return await awaitable
    except BaseException:
        fetch.add_error()
        raise
    finally:
        fetch.record_many([time.perf_counter() - start])


class _Escaped(Exception):
    """Carries a ``SystemExit`` or ``KeyboardInterrupt`` out of a task of the batch: asyncio
    re-raises those two out of the event loop (killing it) when a task raises them."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(exc)
        self.exc = exc


async def _held(awaitable: Awaitable[_T]) -> _T:
    """``await awaitable``, a ``SystemExit`` or ``KeyboardInterrupt`` wrapped in :class:`_Escaped`."""
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Escaped(exc) from None


async def _attempt_window(
    keys: Sequence[Index],
    dataset: AsyncDataset,
    slots: ItemSlots,
    position: int,
    fetch: Stage | None,
    streams: ItemStreams | None = None,
) -> list[Sample | Failed]:
    """Every item of the batch at ``position``, each holding one of ``slots``; a failure is
    :class:`Failed` (``SystemExit`` and ``KeyboardInterrupt`` are raised, as themselves)."""

    async def one(n: int, key: Index) -> Sample | Failed:
        await slots.acquire((position, n))
        try:
            return await _held(_item(dataset, key, fetch, streams))
        except _Escaped:
            raise
        except Exception as exc:
            return Failed(exc)
        finally:
            slots.release()

    try:
        return list(await asyncio.gather(*(one(n, key) for n, key in enumerate(keys))))
    except _Escaped as escaped:
        raise escaped.exc from None


async def gather_window(
    keys: Sequence[Index],
    dataset: AsyncDataset,
    limit: int | ItemSlots,
    fetch: Stage | None = None,
    streams: ItemStreams | None = None,
    *,
    position: int = 0,
    in_turn: bool = False,
) -> list[Sample]:
    """``[await dataset[k] for k in keys]``, each item holding one slot of ``limit`` (an
    :class:`ItemSlots` shared with other batches, the items keyed ``(position, n)``; an int:
    slots of this call's own), each within its own random state with ``streams``; on the first
    failure (in key order) the others are cancelled and awaited, and it is raised as itself.
    With one slot in all, or ``in_turn`` (``item_concurrency=1``: a worker loads its batch item
    after item, as torch's does), the items are awaited one after another in the calling task
    (no task per item), one slot kept from item to item unless an earlier item waits."""
    slots = ItemSlots(limit) if isinstance(limit, int) else limit
    if in_turn or slots.limit == 1:
        return await _in_turn(keys, dataset, slots, position, fetch, streams)

    async def one(n: int, key: Index) -> Sample:
        await slots.acquire((position, n))
        try:
            return await _held(_item(dataset, key, fetch, streams))
        except _Escaped:
            raise
        except Exception as exc:
            note_raised_in(exc, "__getitem__", key)
            raise
        finally:
            slots.release()

    tasks = [asyncio.ensure_future(one(n, key)) for n, key in enumerate(keys)]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:  # the first failure in index order
            error = task.exception() if task.done() and not task.cancelled() else None
            if error is not None:
                raise error.exc if isinstance(error, _Escaped) else error
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _in_turn(
    keys: Sequence[Index],
    dataset: AsyncDataset,
    slots: ItemSlots,
    position: int,
    fetch: Stage | None,
    streams: ItemStreams | None,
) -> list[Sample]:
    """``gather_window`` one item at a time: one slot, kept from item to item unless an
    earlier item of the epoch waits; the first failure ends the batch, as itself."""
    values: list[Sample] = []
    held = False
    try:
        for n, key in enumerate(keys):
            if held:
                held = False  # the slot may go to an earlier item meanwhile
                await slots.pass_on((position, n))
            else:
                await slots.acquire((position, n))
            held = True
            try:
                values.append(await _item(dataset, key, fetch, streams))
            except Exception as exc:
                note_raised_in(exc, "__getitem__", key)
                raise
    finally:
        if held:
            slots.release()
    return values
