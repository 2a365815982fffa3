"""A dataset kind's strategy: how its epoch's graph is built, what it allows, what its state holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.kinds.spec import EpochSpec
from torch_threadloader.plan import Kind, LoaderPlan
from torch_threadloader.resume import StateRules
from torch_threadloader.userdata import Batch, UserObject

if TYPE_CHECKING:
    from torch_threadloader.resources import Resources

__all__ = ["KindStrategy"]


class KindStrategy(StateRules):
    """One dataset kind (:class:`~torch_threadloader.plan.Kind`), chosen once from the plan:
    the one place that knows what the kind is: its graph (:meth:`build`), what it allows, and
    (from :class:`~torch_threadloader.resume.StateRules`, mixed in per kind) how its epoch's
    progress is recorded and what its state holds. Subclasses set the flags and :meth:`build`;
    the defaults are those of a kind with nothing of its own."""

    kind: Kind
    #: Why ``item_concurrency > 1`` does not apply (None: it does).
    item_concurrency_refusal: str | None = None
    #: Items are fetched by index on the loader's threads, one ``dataset[i]`` call at a time
    #: (``per_sample_rng`` and ``max_bytes_in_flight`` apply).
    per_item_threads: bool = False
    #: Items are awaited on the loader's event loop (an async dataset), even without workers.
    awaits_items: bool = False
    #: Its graph can run in worker processes (``worker_processes``).
    runs_in_processes: bool = True
    #: Without workers its epoch uses the loader's kept resources (an event loop that lives on).
    shares_resources_without_workers: bool = False

    @property
    def skippable(self) -> bool:
        """A failed sample can be replaced by another of its batch (``on_error``): items by index."""
        return self.kind.uses_sampler

    def build(self, spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Batch]:
        """The graph of one epoch (``pool``: the kept worker pool of persistent workers, or None):
        its batches, each as ``(tag, batch)`` where the epoch records tags (``Progress.tagged``)."""
        raise NotImplementedError

    def worker_threads(self, plan: LoaderPlan, dataset: UserObject) -> int:
        """How many threads the epoch's workers run on (a kept pool's size with persistent
        workers): one per worker unless the kind's graph says otherwise."""
        return plan.num_workers

    def adopt(self, resources: Resources, dataset: UserObject) -> None:
        """``resources`` serve an epoch of ``dataset`` (an async dataset's ``aclose()`` is then
        awaited when their loop closes)."""

    def on_copy(self, resources: Resources) -> Callable[[UserObject], None] | None:
        """What is told of each worker's copy of the dataset (None: nothing)."""
        return None

    def own_state(self, dataset: UserObject) -> dp.StateDict:
        """What the loader's state holds of the dataset itself, beside the epoch's record."""
        return {}

    def restore(self, dataset: UserObject, plan: LoaderPlan, local: dp.StateDict) -> None:
        """The end of ``load_state_dict()`` for this kind: put the dataset (or graph) where
        ``local`` (this rank's state) says."""
