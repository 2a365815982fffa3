"""How one batch of a map-style dataset is loaded: the same steps as torch's
``_MapDatasetFetcher``, run by the loader's workers (or the caller's thread), with
``item_concurrency``, ``per_sample_rng``, a skipping policy and a byte budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import datapipes as dp
from torch_threadloader.budget import ByteBudget, nbytes
from torch_threadloader.collate import collate_as_worker
from torch_threadloader.fetch.getters import (
    GetItem,
    GetItems,
    ItemWindow,
    Load,
    Loaded,
    MapDataset,
    batch_getter,
    failed_index,
)
from torch_threadloader.fetch.timed import timed_loader
from torch_threadloader.fetch.workers import Workers
from torch_threadloader.random_state import ItemStreams, WorkerRNG, drawing
from torch_threadloader.sample_rng import sample_generator
from torch_threadloader.skip import (
    ErrorPolicy,
    Failed,
    TooManyErrors,
    attempt,
    current_position,
    forget_used,
    note_collate,
    note_raised_in,
    stage_of,
    used_indices,
)
from torch_threadloader.stats import LoaderStats
from torch_threadloader.userdata import Batch, CollateFn, Index, Indices, Sample
from torch_threadloader.worker_info import sample_worker_info, set_worker_info

if TYPE_CHECKING:
    from torch.utils.data._utils.worker import WorkerInfo

    from torch_threadloader.fetch.shared_items import SharedItems

__all__ = ["MapFetcher", "as_worker", "drawn_by", "drawn_per_sample"]

_In = TypeVar("_In")
_Out = TypeVar("_Out")


class MapFetcher:
    """Loads one batch of a map-style dataset exactly as torch's ``_MapDatasetFetcher``:
    ``__getitems__(indices)`` when the dataset defines it, else ``[dataset[i] for i in indices]``
    (``item_concurrency`` of them at once on ``items_pool()``, each with the worker's info),
    then ``collate_fn``. Without auto-collation the index is a single key and ``collate_fn``
    converts one item. ``finish`` (pinning) runs on the result. With ``shared`` (items as the
    unit of concurrency, :class:`~torch_threadloader.fetch.shared_items.SharedItems`) every
    batch's items hold the epoch's shared slots instead, and its collation waits for its turn."""

    def __init__(
        self,
        *,
        auto_collation: bool,
        collate_fn: CollateFn,
        item_concurrency: int,
        items_pool: Callable[[], dp.ThreadPool] | None,
        return_indices: bool,
        finish: Callable[[Batch], Batch] | None,
        stats: LoaderStats | None = None,
        policy: ErrorPolicy | None = None,
        budget: ByteBudget | None = None,
        sample_rng: tuple[int, int] | None = None,
        item_streams: ItemStreams | None = None,
        shared: SharedItems | None = None,
    ) -> None:
        self.shared = shared
        self.stats = stats
        self.policy = policy if policy is not None and policy.skips else None
        self.budget = budget
        self.sample_rng = sample_rng  # per_sample_rng: (base seed, epoch) of this epoch's draws
        # Items of a worker that run at once draw each from its own stream (else the worker's state).
        self.item_streams = item_streams if sample_rng is None else None
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.item_concurrency = item_concurrency
        self.items_pool = items_pool
        self.return_indices = return_indices
        self.finish = finish

    def plain(self, dataset: MapDataset) -> Load:
        """The loading function for ``dataset`` in the caller's thread (``num_workers=0``),
        with nothing to look up per batch in the common case."""
        if (
            self.stats is None
            and self.policy is None
            and self.budget is None
            and not self.return_indices
            and self.auto_collation
            and self.item_concurrency == 1
            and self.finish is None
            and self.sample_rng is None
            and self.item_streams is None
            and batch_getter(dataset) is None
        ):
            getitem, collate = dataset.__getitem__, self.collate_fn

            def load(indices: Indices) -> Batch:
                left = iter(indices)
                try:
                    data = [getitem(i) for i in left]  # not map(): a StopIteration it raises must propagate
                except Exception as exc:
                    note_raised_in(exc, "__getitem__", failed_index(indices, left))
                    raise
                try:  # collate_as_worker's step, inline: one call less per batch on this path
                    return collate(data)
                except Exception as exc:
                    note_collate(exc, indices)
                    raise

            return load
        return self.for_dataset(dataset, None)

    def for_worker(self, workers: Workers) -> Callable[[int], Load]:
        """``worker_fn`` for a ThreadMapper: worker ``w`` starts, then loads with its own copy."""

        def start(worker_id: int) -> Load:
            dataset = workers.start(worker_id)
            return as_worker(self.for_dataset(dataset, workers.info(worker_id)), workers.rng(worker_id))

        return start

    def getters(self, dataset: MapDataset, info: WorkerInfo | None) -> tuple[GetItems | None, GetItem]:
        """The dataset's batch getter (or None) and ``__getitem__``, each run under its
        sample's draws with ``per_sample_rng`` (a batch getter under its first index's)."""
        getitems, getitem = batch_getter(dataset), dataset.__getitem__
        if self.item_streams is not None:  # __getitems__ is one call of the worker's
            return getitems, drawn_by(getitem, self.item_streams, info)
        if self.sample_rng is None:
            return getitems, getitem
        seed, epoch = self.sample_rng
        return (
            None if getitems is None else drawn_per_sample(getitems, seed, epoch, info, key=_first),
            drawn_per_sample(getitem, seed, epoch, info),
        )

    def window(self, getitems: GetItems | None) -> ItemWindow | None:
        """How a batch's items run at once: on the epoch's shared slots (every batch, also one
        of a single item: ``every_batch``), ``item_concurrency`` at a time on the item pool
        (batches of two items or more), or None: one after another in the worker's thread
        (``item_concurrency=1``, or ``__getitems__``: one call of the worker's)."""
        if self.item_concurrency == 1 or getitems is not None:
            return None
        if self.shared is not None:
            return self.shared.load_items
        items_pool, limit = self.items_pool, self.item_concurrency
        if items_pool is None:
            return None

        def on_pool(fn: Callable[[_In], _Out], keys: Sequence[_In], /) -> list[_Out]:
            return items_pool().map_window(fn, keys, limit)

        return on_pool

    @property
    def every_batch(self) -> bool:
        """Every batch's items go through :meth:`window`, also a batch of one item."""
        return self.shared is not None

    def for_dataset(self, dataset: MapDataset, info: WorkerInfo | None) -> Load:
        """The loading function for ``dataset`` on a worker with ``info`` (``None``: the
        caller's thread); with stats, :func:`~torch_threadloader.fetch.timed.timed_loader`."""
        if self.stats is not None:
            return timed_loader(self, dataset, info, self.stats)
        getitems, getitem = self.getters(dataset, info)
        auto, collate, finish, return_indices = self.auto_collation, self.collate_fn, self.finish, self.return_indices
        window, every = self.window(getitems), self.every_batch
        items = self.items_loader(getitem, getitems, info)

        def getitem_as_worker(index: Index) -> Sample:
            set_worker_info(info)  # an item thread works for the worker that loads the batch
            try:
                return noted_getitem(getitem, index)
            finally:
                set_worker_info(None)

        def load(indices: Indices) -> Loaded:
            left = None  # the indices the loop has yet to take: the failing one is named from it
            try:
                if not auto:
                    data = getitem(indices)
                elif items is not None:
                    data = items(indices)
                elif getitems is not None:
                    data = getitems(indices)
                elif window is not None and (every or len(indices) > 1):
                    data = window(getitem_as_worker, indices)
                else:
                    left = iter(indices)
                    data = [getitem(i) for i in left]  # not map(): a StopIteration it raises must propagate
            except Exception as exc:
                if not isinstance(exc, TooManyErrors):  # the epoch's count, not this batch's call
                    index = indices if left is None else failed_index(indices, left)
                    note_raised_in(exc, "__getitems__" if auto and getitems is not None else "__getitem__", index)
                raise
            batch = collate_as_worker(collate, data, indices, info)
            if finish is not None:
                batch = finish(batch)
            if return_indices and items is not None:
                indices = used_indices() or indices  # a skipped sample's slot names its replacement
            return (indices, batch) if return_indices else batch

        return load

    def items_loader(self, getitem: GetItem, getitems: GetItems | None, info: WorkerInfo | None) -> GetItems | None:
        """A batch's items with a skipping policy (failing samples recorded and replaced; a
        failing ``__getitems__`` is loaded again item by item to find them) and a byte budget
        (each item charged to its batch as it comes); ``None`` with neither."""
        policy, budget = self.policy, self.budget
        if policy is None and budget is None:
            return None
        window, every = self.window(getitems), self.every_batch
        fetch = self.stats.stages["fetch"] if self.stats is not None else None

        def fetched(index: Index) -> Sample | Failed:
            value = attempt(getitem, index) if policy is not None else noted_getitem(getitem, index)
            if isinstance(value, Failed) and fetch is not None and stage_of(value.exc) == "fetch":
                fetch.add_error()  # a stage() counted its own
            return value

        def one(index: Index, position: int | None) -> Sample | Failed:
            if budget is None or position is None:
                return fetched(index)
            reserved = budget.admit(position)  # room first, then the fetch
            size = 0
            try:
                value = fetched(index)
                size = 0 if isinstance(value, Failed) else nbytes(value)
            finally:
                budget.charge(position, size, reserved)
            return value

        def items(indices: Indices) -> list[Sample]:
            position = current_position()
            forget_used()
            if getitems is not None:
                counted = budget if position is not None else None  # charged per batch position
                reserved = counted.admit(position, len(indices)) if counted is not None and position is not None else 0
                size = 0
                try:
                    values = list(getitems(indices))
                    size = nbytes(values)
                except Exception:
                    if policy is None:
                        raise
                else:  # charged as one
                    return values
                finally:
                    if counted is not None and position is not None:
                        counted.charge(position, size, reserved, len(indices))
            if window is not None and (every or len(indices) > 1):

                def one_as_worker(index: Index) -> Sample | Failed:
                    set_worker_info(info)
                    try:
                        return one(index, position)
                    finally:
                        set_worker_info(None)

                outcomes = window(one_as_worker, indices)
            else:
                outcomes = [one(i, position) for i in indices]
            return policy.settle(indices, outcomes) if policy is not None else outcomes

        return items


def noted_getitem(getitem: GetItem, index: Index) -> Sample:
    """``getitem(index)``, an error noted as raised in ``__getitem__(index)``."""
    try:
        return getitem(index)
    except Exception as exc:
        note_raised_in(exc, "__getitem__", index)
        raise


def _first(indices: Indices) -> Index:
    return indices[0] if len(indices) else 0


def as_worker(load: Callable[[_In], _Out], rng: WorkerRNG | None) -> Callable[[_In], _Out]:
    """``load`` run within the worker's random state (torch's, Python's and NumPy's global
    random calls act on ``rng``, as in the worker's own process); ``load`` itself for ``None``."""
    if rng is None:
        return load

    def load_as_worker(item: _In) -> _Out:
        with drawing(rng):
            return load(item)

    return load_as_worker


def drawn_by(
    getitem: Callable[[_In], _Out],
    rng_of: Callable[[Index], WorkerRNG],
    info: WorkerInfo | None,
    *,
    key: Callable[[_In], Index] | None = None,
) -> Callable[[_In], _Out]:
    """``getitem`` run, for each index, within the random state ``rng_of(index)``
    (``rng_of(key(index))`` with ``key``), with a worker info whose ``rng`` is that state (so
    ``torch.random.thread_safe_generator()`` is its generator); the worker's own info is set
    back after."""

    def getitem_drawn(index: _In) -> _Out:
        rng = rng_of(index if key is None else key(index))
        if info is not None:
            set_worker_info(sample_worker_info(info, rng))
        try:
            with drawing(rng):
                return getitem(index)
        finally:
            if info is not None:
                set_worker_info(info)

    return getitem_drawn


def drawn_per_sample(
    getitem: Callable[[_In], _Out],
    seed: int,
    epoch: int,
    info: WorkerInfo | None,
    *,
    key: Callable[[_In], Index] | None = None,
) -> Callable[[_In], _Out]:
    """``getitem`` run, for each index, within the random state of
    ``sample_generator(seed, epoch, index)`` (``key(index)`` with ``key``; see
    :func:`drawn_by`). The draws depend on nothing but the three numbers: not on the thread,
    the worker or the timing. torch's global generator is not touched."""

    def rng_of(index: Index) -> WorkerRNG:
        try:
            return WorkerRNG.for_sample(sample_generator(seed, epoch, index))
        except ValueError as exc:
            exc.add_note(f"per_sample_rng=True draws per index, and needs int indices >= 0: got {index!r}")
            raise

    return drawn_by(getitem, rng_of, info, key=key)
