"""What an epoch reads of its loader, read once: :class:`EpochInputs`.

``iter(loader)``, ``state_dict()`` and ``load_state_dict()`` turn the loader into one
:class:`EpochInputs` (``ThreadLoader._inputs()``), as torch's ``_BaseDataLoaderIter.__init__``
reads its loader once: the frozen plan, the objects a plan cannot hold (dataset, samplers,
generator, ``collate_fn``, ``worker_init_fn``, ``on_error``, the multiprocessing context) and
what the loader carries from epoch to epoch (:class:`LoaderState`). Everything below the
loader reads these values, never the loader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, Protocol

import torch

from torch_threadloader.over_budget import OverBudgetLog
from torch_threadloader.userdata import Batch, Sample, UserObject

if TYPE_CHECKING:
    import datapipes as dp
    from torch_threadloader.budget import BudgetTotals, ByteBudget
    from torch_threadloader.plan import LoaderPlan
    from torch_threadloader.resources import Kept
    from torch_threadloader.skip import ErrorLog, OnError
    from torch_threadloader.stall import StallLog
    from torch_threadloader.stats import LoaderStats

__all__ = ["EpochInputs", "LoaderState", "StateSource"]


class StateSource(Protocol):
    """The most recent epoch's record (``torch_threadloader.resume.EpochRecord``), as the
    loader holds it for ``state_dict()``."""

    #: ``per_sample_rng``: the epoch number the epoch's items draw for (None without it).
    sample_epoch: int | None

    def state(self, inputs: EpochInputs) -> dp.StateDict: ...


@dataclasses.dataclass(eq=False, slots=True)
class LoaderState:
    """What a loader carries from epoch to epoch. Owned by the loader; an epoch and a state
    read and change the mutable fields under ``kept.lock``."""

    #: The kept threads and processes, the base seed of persistent workers, the open epochs.
    kept: Kept
    #: ``on_error``: the loader's record of skips, over every epoch.
    errors: ErrorLog
    #: ``stats=True``: the stats of every epoch (None without).
    stats: LoaderStats | None
    #: ``stall_report_after``: the reports of every epoch (``loader.stalls()``).
    stalls: StallLog
    #: A state ``load_state_dict()`` left for the next ``iter()``.
    pending: dp.StateDict | None = None
    #: What the most recent epoch delivered (for ``state_dict()``).
    record: StateSource | None = None
    #: ``per_sample_rng``: the epoch number the next ``iter()`` draws for.
    next_epoch: int = 0
    #: The most recent epoch's byte budget (``max_bytes_in_flight``); with worker processes, their totals.
    last_budget: ByteBudget | BudgetTotals | None = None
    #: The most recent epoch's node graph (its counters are ``stats()["graph"]``).
    last_graph: dp.Node[object] | None = None
    #: ``max_batch_cost``: the samples over the budget alone, over every epoch.
    over_budget: OverBudgetLog = dataclasses.field(default_factory=OverBudgetLog)


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class EpochInputs:
    """A loader read once, for one epoch or one state (see the module's docstring)."""

    plan: LoaderPlan
    #: The user's dataset: anything torch accepts.
    dataset: UserObject
    #: torch's ``sampler`` (a ``Sampler`` or any iterable of indices).
    sampler: UserObject
    #: torch's ``batch_sampler`` (None without auto-collation).
    batch_sampler: UserObject
    generator: torch.Generator | None
    collate_fn: Callable[[list[Sample]], Batch]
    #: ``max_batch_cost``'s ``sample_cost`` (a loaded sample's cost), else None.
    sample_cost: Callable[[Sample], int] | None
    worker_init_fn: Callable[[int], None] | None
    #: ``on_error`` as given: ``"raise"``, ``"skip"`` or the user's callable.
    on_error: OnError
    #: How worker processes start (None: no worker processes).
    mp_context: BaseContext | None
    #: ``len()`` of an IterableDataset as the loader's ``len()`` reported it (torch's warning), else None.
    iterable_len: int | None
    state: LoaderState
    #: The loader itself, held so that an epoch keeps it alive (collecting a loader closes its
    #: kept threads); never read.
    owner: object

    @property
    def index_sampler(self) -> UserObject:
        """torch's ``_index_sampler``: the batch sampler with auto-collation, else the sampler
        (the epoch's ``len()``; a kind that reads indices reads them from it)."""
        return self.batch_sampler if self.plan.auto_collation else self.sampler

    @property
    def kept(self) -> Kept:
        """The loader's kept threads and processes (``state.kept``)."""
        return self.state.kept
