"""What a worker process receives when it starts: the loader's :class:`LoaderPlan` and the
objects a plan cannot hold (the dataset, ``collate_fn``, ``worker_init_fn``, ``on_error``).
Pickled once per child (a dataset that cannot be pickled is named by ``pool``'s error). The
child builds its graph from these (``EpochSpec.in_child``), never from a loader."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from torch_threadloader.plan import Kind, LoaderPlan
from torch_threadloader.userdata import Batch, Index, Sample, UserObject

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["ChildInputs"]


@dataclasses.dataclass(frozen=True)
class ChildInputs:
    """A worker process's inputs: ``plan`` (the loader's, as it is) and what it cannot hold."""

    plan: LoaderPlan
    dataset: UserObject
    collate_fn: Callable[[list[Sample]], Batch]
    worker_init_fn: Callable[[int], None] | None
    #: ``"raise"``, ``"skip"`` or a callable: each epoch of a child records into a policy of its own.
    on_error: str | Callable[[Index, BaseException], bool]
    #: ``max_batch_cost`` with an ``IterableDataset``: the child's workers cut their streams by
    #: ``sample_cost``; None otherwise (the parent cuts a map-style epoch's samples).
    sample_cost: Callable[[Sample], int] | None = None

    @classmethod
    def of(cls, inputs: EpochInputs) -> ChildInputs:
        """What a child of a loader with ``worker_processes > 0`` (read as ``inputs``) receives."""
        plan = inputs.plan
        if plan.max_batch_cost is not None and plan.kind is Kind.ITERABLE:  # each worker cuts its stream
            return cls(
                plan, inputs.dataset, inputs.collate_fn, inputs.worker_init_fn, inputs.on_error, inputs.sample_cost
            )
        # max_batch_cost: a child loads one sample per "batch" and gives it back as a list
        collate = list if plan.max_batch_cost is not None else inputs.collate_fn
        return cls(plan, inputs.dataset, collate, inputs.worker_init_fn, inputs.on_error)

    def same_start(self, other: ChildInputs) -> bool:
        """Children started with these inputs run as ones started with ``other`` would: the
        same plan (what the children and the parent's transport read of it) and the same
        dataset, ``collate_fn``, ``worker_init_fn``, ``on_error`` and ``sample_cost`` objects."""
        objects = ("dataset", "collate_fn", "worker_init_fn", "on_error", "sample_cost")
        return self.graph_plan() == other.graph_plan() and all(
            getattr(self, name) is getattr(other, name) for name in objects
        )

    @property
    def cuts_samples(self) -> bool:
        """``max_batch_cost`` over a sampler: a child loads samples, which the parent cuts
        (an ``IterableDataset``'s workers cut their own streams, in the child)."""
        return self.plan.max_batch_cost is not None and self.plan.kind is not Kind.ITERABLE

    def graph_plan(self) -> LoaderPlan:
        """The plan a child's graph is built from: the loader's, with the child's differences
        (at least one worker thread; no timeout, the parent keeps the loader's; no worker
        processes of its own; no pinning, which is the parent's; ranks agree in the parent
        (``cost_sync``); with ``max_batch_cost`` over a sampler, samples with their indices,
        which the parent cuts by cost)."""
        plan = dataclasses.replace(
            self.plan,
            num_workers=self.num_workers,
            prefetch=self.child_prefetch,
            timeout=0.0,
            worker_processes=0,
            pin_memory=False,
            cost_sync=None,
        )
        if not self.cuts_samples:
            return plan
        return dataclasses.replace(plan, return_indices=True, max_batch_cost=None, group_window=None, cost_mode="sum")

    @property
    def kind(self) -> Kind:
        return self.plan.kind

    @property
    def count(self) -> int:
        """``P``: the loader's worker processes."""
        return self.plan.worker_processes

    @property
    def num_workers(self) -> int:
        """Worker threads of one child: at least one, so every batch is loaded as a worker's
        (its dataset copy, its ``WorkerInfo``), as in torch's worker processes."""
        return max(self.plan.num_workers, 1)

    @property
    def child_prefetch(self) -> int:
        """``prefetch_factor`` in a child's units: batches, or with ``max_batch_cost`` over a sampler samples
        (a child's "batch" is one sample: ``batch_size`` of them per batch, as worker threads hold)."""
        if self.cuts_samples:
            return self.plan.prefetch * (self.plan.batch_size or 1)
        return self.plan.prefetch

    @property
    def capacity(self) -> int:
        """Units one child's graph holds (loading, or done and waiting): its workers times
        :attr:`child_prefetch`."""
        return self.num_workers * self.child_prefetch

    @property
    def total_workers(self) -> int:
        """Workers of the whole loader: thread ``t`` of child ``c`` is worker ``t * P + c``."""
        return self.num_workers * self.count

    @property
    def budget_share(self) -> int | None:
        """Bytes each process may hold (``max_bytes_in_flight // P``), or None."""
        limit = self.plan.max_bytes_in_flight
        return None if limit is None else max(limit // self.count, 1)
