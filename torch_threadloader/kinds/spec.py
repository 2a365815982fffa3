"""What an epoch's graph is built from (:class:`EpochSpec`), handed to its kind's strategy."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, NamedTuple, cast

from torch.utils.data import default_collate

import datapipes as dp
from torch_threadloader.budget import ByteBudget
from torch_threadloader.collate import fast_default_collate
from torch_threadloader.fetch import Workers
from torch_threadloader.over_budget import OverBudgetLog
from torch_threadloader.plan import Kind, LoaderPlan
from torch_threadloader.random_state import ItemStreams
from torch_threadloader.skip import ErrorPolicy
from torch_threadloader.stats import LoaderStats, Stage, timed_iter
from torch_threadloader.userdata import Batch, CollateFn, Indices, Sample, UserObject

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs
    from torch_threadloader.resources import Resources

__all__ = ["ChildObjects", "EpochSpec", "TimedIndices"]


class EpochSpec:
    """What an epoch's graph is built from: the loader's inputs (its plan, dataset,
    ``collate_fn``, stats), the epoch's skipping policy, resources, workers, indices and resume
    part. The strategies read it, never the loader."""

    def __init__(
        self,
        inputs: EpochInputs,
        resources: Resources,
        workers: Workers | None,
        pin: bool,
        indices: Iterable[Indices] | None,
        resume: dp.StateDict | None = None,
        budget: ByteBudget | None = None,
        *,
        worker_of: Callable[[int], int] | None = None,
        policy: ErrorPolicy | None = None,
    ) -> None:
        # For worker processes' graph (processes.process_graph) and the sampler's feed; None in a worker process.
        self.inputs: EpochInputs | None = inputs
        self._settle(inputs.plan, inputs.dataset, inputs.collate_fn, inputs.state.stats, policy)
        self._epoch(resources, workers, pin, indices, resume, budget, worker_of)
        self._costs(inputs.sample_cost, inputs.state.over_budget)
        plan = inputs.plan
        # The dispatcher's items are samples with defer_stragglers or max_batch_cost (an
        # IterableDataset's workers cut their own streams: batches), else batches.
        by_cost = plan.max_batch_cost is not None and plan.kind is not Kind.ITERABLE
        self.stall: dp.StallWatch | None = inputs.state.stalls.watch(
            plan.stall_report_after, samples=plan.defer_stragglers or by_cost
        )

    @classmethod
    def in_child(
        cls,
        plan: LoaderPlan,
        objects: ChildObjects,
        resources: Resources,
        workers: Workers,
        indices: Iterable[Indices] | None,
        resume: dp.StateDict | None,
        budget: ByteBudget | None,
        worker_of: Callable[[int], int] | None,
    ) -> EpochSpec:
        """A worker process's spec: from the plan it was sent and the objects a plan cannot
        hold, no loader's inputs (``inputs`` is None: its sampler, the inbox, is pulled in ``next()``)."""
        spec = cls.__new__(cls)
        spec.inputs = None
        spec._settle(plan, objects.dataset, objects.collate_fn, objects.stats, objects.policy)
        spec._epoch(resources, workers, False, indices, resume, budget, worker_of)
        spec._costs(objects.sample_cost, objects.over_budget)
        return spec

    def _costs(self, sample_cost: Callable[[Sample], int] | None, over_budget: OverBudgetLog) -> None:
        """``max_batch_cost``: ``sample_cost``, and the log of samples over the budget (the
        loader's; a worker process's own, drained to its parent)."""
        self.sample_cost = sample_cost
        self.over_budget = over_budget

    def _settle(
        self,
        plan: LoaderPlan,
        dataset: UserObject,
        collate_fn: CollateFn,
        stats: LoaderStats | None,
        policy: ErrorPolicy | None,
    ) -> None:
        """What the loader settled: its plan and the objects it cannot hold."""
        self.plan = plan
        self.dataset = dataset
        self.policy = policy  # on_error: the epoch's skipping policy
        self.stats = stats  # a LoaderStats when the loader keeps stats
        self.num_workers = plan.num_workers
        self.prefetch = plan.prefetch
        self.timeout = plan.graph_timeout
        # stall_report_after: the watch of the epoch's dispatcher (None: off, and in a worker
        # process, whose parent reports).
        self.stall = None
        self.persistent = plan.persistent
        self.auto_collation = plan.auto_collation
        self.collate_fn = fast_default_collate if collate_fn is default_collate else collate_fn

    def _epoch(
        self,
        resources: Resources,
        workers: Workers | None,
        pin: bool,
        indices: Iterable[Indices] | None,
        resume: dp.StateDict | None,
        budget: ByteBudget | None,
        worker_of: Callable[[int], int] | None,
    ) -> None:
        """What this epoch runs on and reads."""
        self.budget = budget  # max_bytes_in_flight, for this epoch
        # Map-style and async, in order: the batch at a position goes to worker
        # ``worker_of(position) % num_workers`` (None: the position's own; a worker process
        # numbers its share from 0 and is told the slot of each batch).
        self.worker_of = worker_of
        if self.stats is not None and indices is not None:
            indices = TimedIndices(indices, self.stats.stages["sampling"])
        self.resume = resume  # the part of a loaded state this epoch resumes from
        # An IterableDataset's worker copies' own states to start this epoch from (a state
        # loaded between epochs, where the copies live on: persistent workers), else None.
        self.start_states: list[dp.StateDict | None] | None = None
        # A datapipes graph as the dataset: told the graph's state once it is opened.
        self.graph_opened: Callable[[dp.StateDict], None] | None = None
        # per_sample_rng: (base seed, epoch) that item i draws from, with sample_generator.
        self.sample_rng: tuple[int, int] | None = None
        # Each item's own random state where a worker's items run at once or in any order
        # (without workers the loader sets one from the epoch's base seed).
        self.item_streams: ItemStreams | None = workers.epoch_streams() if workers is not None else None
        self.indices = indices  # the epoch's index batches, iterated once (see started_indices)
        self.resources = resources
        self.workers = workers
        self.finish: Callable[[Batch], Batch] | None = dp.pin_memory if pin else None


class ChildObjects(NamedTuple):
    """What a worker process's graph is built from beside its plan: the objects a plan cannot
    hold (the dataset, ``collate_fn``, ``sample_cost``), the process's stats, the epoch's error
    policy and the process's log of samples over ``max_batch_cost``."""

    dataset: UserObject
    collate_fn: CollateFn
    stats: LoaderStats | None
    policy: ErrorPolicy
    sample_cost: Callable[[Sample], int] | None
    over_budget: OverBudgetLog


class TimedIndices:
    """An epoch's index iterable whose ``next()`` calls are timed as the ``sampling`` stage;
    ``sampler`` and ``len()`` are the wrapped one's (a ``TypeError`` where it has none)."""

    def __init__(self, indices: Iterable[Indices], target: Stage) -> None:
        self.sampler = indices
        self._indices = indices
        self._target = target

    def __iter__(self) -> Iterator[Indices]:
        return timed_iter(self._indices, self._target)

    def __len__(self) -> int:
        return len(cast(Sized, self._indices))
