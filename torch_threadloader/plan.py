"""The loader's plan: what it will do, settled once and read by everything downstream.

:func:`make_plan` builds a :class:`LoaderPlan` at the end of ``ThreadLoader.__init__`` and in
``__setstate__``. The epoch, the graph builders, resume and the worker processes read the
plan (in :class:`~torch_threadloader.inputs.EpochInputs`), never the loader; a worker process is
sent the same plan. A plan is frozen and picklable (plain values only: no dataset, no functions).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Protocol

import datapipes as dp
from torch_threadloader.concurrency import async_prefetch
from torch_threadloader.skip import OnError
from torch_threadloader.userdata import UserObject

__all__ = ["PLAN_SOURCES", "Kind", "LoaderPlan", "Settings", "kind_of", "make_plan"]

#: The loader's attributes a plan is made from that may be set after construction (torch lets a
#: user set ``loader.num_workers = 4`` later): setting one rebuilds the plan (``ThreadLoader.__setattr__``).
PLAN_SOURCES = frozenset(
    {
        "num_workers",
        "prefetch_factor",
        "timeout",
        "pin_memory",
        "in_order",
        "item_concurrency",
        "return_indices",
        "max_bytes_in_flight",
        "worker_copy",
        "per_sample_rng",
        "own_random_state",
        "process_nice",
        "process_affinity",
        "defer_stragglers",
        "straggler_window",
        "max_batch_cost",
        "sample_cost",
        "cost_mode",
        "group_window",
        "cost_sync",
        "stall_report_after",
    }
)


class Settings(Protocol):
    """The loader's public settings (torch's arguments and ``ThreadLoader``'s own) that a plan is
    made from and a kind checks: a ``ThreadLoader``."""

    @property
    def num_workers(self) -> int: ...
    @property
    def prefetch_factor(self) -> int | None: ...
    @property
    def timeout(self) -> float: ...
    @property
    def persistent_workers(self) -> bool: ...
    @property
    def pin_memory(self) -> bool: ...
    @property
    def in_order(self) -> bool: ...
    @property
    def batch_size(self) -> int | None: ...
    @property
    def drop_last(self) -> bool: ...
    @property
    def sampler(self) -> UserObject: ...  # a Sampler or any iterable of indices
    @property
    def batch_sampler(self) -> UserObject: ...  # None without auto-collation
    @property
    def item_concurrency(self) -> int: ...
    @property
    def return_indices(self) -> bool: ...
    @property
    def keep_stats(self) -> bool: ...
    @property
    def on_error(self) -> OnError: ...  # "raise", "skip" or the user's callable
    @property
    def max_bytes_in_flight(self) -> int | None: ...
    @property
    def worker_processes(self) -> int: ...
    @property
    def process_nice(self) -> int: ...
    @property
    def process_affinity(self) -> tuple[frozenset[int], ...] | None: ...  # each worker process's CPU set
    @property
    def worker_copy(self) -> str: ...
    @property
    def per_sample_rng(self) -> bool: ...
    @property
    def own_random_state(self) -> bool: ...
    @property
    def defer_stragglers(self) -> bool: ...
    @property
    def straggler_window(self) -> int | None: ...
    @property
    def max_batch_cost(self) -> int | None: ...
    @property
    def sample_cost(self) -> UserObject: ...  # the user's callable (sample -> int), or None
    @property
    def cost_mode(self) -> str: ...
    @property
    def group_window(self) -> int | None: ...
    @property
    def cost_sync(self) -> bool | None: ...
    @property
    def stall_report_after(self) -> float | None: ...


class Kind(enum.StrEnum):
    """What kind of dataset a loader loads; each has its own strategy (graph, progress, state).

    A ``StrEnum``: ``Kind.MAP == "map"``. A state dict stores ``kind.value`` (plain data)."""

    MAP = "map"  #: a map-style dataset with a sync ``__getitem__``
    ITERABLE = "iterable"  #: an ``IterableDataset``
    ASYNC = "async"  #: a map-style dataset with an ``async def __getitem__``
    NODE = "node"  #: a ``datapipes`` graph given as the dataset

    @property
    def uses_sampler(self) -> bool:
        """Its items are read by index, from the loader's sampler (map-style and async)."""
        return self in (Kind.MAP, Kind.ASYNC)


def kind_of(dataset: UserObject, *, is_iterable: bool, is_async: bool) -> Kind:
    """The :class:`Kind` of ``dataset`` (a datapipes node first: a node is also iterable)."""
    if isinstance(dataset, dp.Node):
        return Kind.NODE
    if is_iterable:
        return Kind.ITERABLE
    return Kind.ASYNC if is_async else Kind.MAP


@dataclasses.dataclass(frozen=True, slots=True)
class LoaderPlan:
    """The loader's settings, as the engine reads them. Built by :func:`make_plan`."""

    kind: Kind
    num_workers: int
    #: ``persistent_workers and num_workers > 0``: the workers live across epochs.
    persistent: bool
    #: Batches each worker may hold ahead (``prefetch_factor``; when it is None 2, or for an
    #: async dataset without workers 2 per batch's worth of ``item_concurrency``).
    prefetch: int
    #: Seconds ``next()`` waits for a batch (0: for ever).
    timeout: float
    #: Batches are made by a batch sampler (torch's "auto-collation").
    auto_collation: bool
    batch_size: int | None
    drop_last: bool
    in_order: bool
    item_concurrency: int
    return_indices: bool
    pin_memory: bool
    keep_stats: bool
    #: ``on_error`` replaces a failed sample (``"skip"`` or a callable), not only raises.
    skips: bool
    max_bytes_in_flight: int | None
    worker_processes: int
    process_nice: int
    process_affinity: tuple[frozenset[int], ...] | None
    worker_copy: str
    per_sample_rng: bool
    #: Each worker owns the global random state inside its calls (``random_state``).
    own_random_state: bool
    #: Batches are cut from the samples that finish first, within ``straggler_window`` samples
    #: of the epoch's order (``kinds.stragglers``); the ledger then counts samples, not batches.
    defer_stragglers: bool = False
    #: The window of ``defer_stragglers`` in samples (None: ``kinds.stragglers.window_of``'s default).
    straggler_window: int | None = None
    #: Batches are cut after loading by the samples' cost, within this budget (``kinds.by_cost``);
    #: the ledger then counts samples, not batches. None: batches of ``batch_size``.
    max_batch_cost: int | None = None
    #: How a batch's cost is counted: ``"sum"`` or ``"padded"`` (``datapipes.COST_MODES``).
    cost_mode: str = "sum"
    #: Samples sorted by cost within each window of this many positions before the cut (None: none).
    group_window: int | None = None
    #: Each batch's size agreed across the ranks: None (automatic: a ``DistributedSampler`` in an
    #: initialized default process group), True or False.
    cost_sync: bool | None = None
    #: Seconds a ``next()`` waits before its wait is reported (None: never; see ``torch_threadloader.stall``).
    stall_report_after: float | None = 300

    @property
    def graph_timeout(self) -> float | None:
        """The seconds the epoch's graph waits for a batch of its workers (None: for ever, and
        always without workers: the caller's thread loads the batch itself)."""
        return self.timeout if self.timeout and self.num_workers > 0 else None

    @property
    def in_processes(self) -> bool:
        """The loader's threads run in worker processes."""
        return self.worker_processes > 0


def _prefetch(loader: Settings, kind: Kind) -> int:
    """Batches per worker ahead: ``prefetch_factor``, else 2 (async: enough for ``item_concurrency``)."""
    if kind is Kind.ASYNC:
        return async_prefetch(loader.prefetch_factor, loader.batch_size, loader.item_concurrency)
    return loader.prefetch_factor if loader.prefetch_factor is not None else 2


def make_plan(loader: Settings, *, kind: Kind, skips: bool) -> LoaderPlan:
    """The plan of ``loader`` (a constructed ``ThreadLoader``) for a dataset of ``kind``."""
    affinity = loader.process_affinity
    return LoaderPlan(
        kind=kind,
        num_workers=int(loader.num_workers),
        persistent=bool(loader.persistent_workers) and loader.num_workers > 0,
        prefetch=_prefetch(loader, kind),
        timeout=loader.timeout,  # as given: the timeout error prints it as torch does (1, not 1.0)
        auto_collation=loader.batch_sampler is not None,
        batch_size=loader.batch_size,
        drop_last=bool(loader.drop_last),
        in_order=bool(loader.in_order),
        item_concurrency=int(loader.item_concurrency),
        return_indices=bool(loader.return_indices),
        pin_memory=bool(loader.pin_memory),
        keep_stats=bool(loader.keep_stats),
        skips=skips,
        max_bytes_in_flight=loader.max_bytes_in_flight,
        worker_processes=int(loader.worker_processes),
        process_nice=int(loader.process_nice),
        process_affinity=tuple(affinity) if affinity is not None else None,
        worker_copy=str(loader.worker_copy),
        per_sample_rng=bool(loader.per_sample_rng),
        own_random_state=bool(loader.own_random_state),
        defer_stragglers=bool(loader.defer_stragglers),
        straggler_window=loader.straggler_window,
        max_batch_cost=loader.max_batch_cost,
        cost_mode=loader.cost_mode,
        group_window=loader.group_window,
        cost_sync=loader.cost_sync,
        stall_report_after=loader.stall_report_after,
    )
