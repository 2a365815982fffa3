"""Resume of an ``IterableDataset``: per worker, the batches it delivered and its copy's state.

A state holds, per worker, the batches it delivered (and the dataset copy's own
``state_dict()`` after its last one, when it has one, or the items it read), whether its
iterator ended, and which worker is next in turn; each worker's share depends on how many
there are, so ``num_workers`` must stay the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.resume.data import OwnState, is_stateful, snapshot
from torch_threadloader.resume.generators import Eager, generators_of
from torch_threadloader.resume.ledgers import IterableLedger, NodeLedger
from torch_threadloader.resume.strategy import Progress, StateRules
from torch_threadloader.userdata import UserObject

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["IterableState", "StreamProgress", "total_workers"]


def total_workers(inputs: EpochInputs) -> int:
    """How many workers share an ``IterableDataset``: ``num_workers`` (at least one) in each
    worker process, or in this process without ``worker_processes``."""
    return max(int(inputs.plan.num_workers), 1) * max(int(inputs.plan.worker_processes), 1)


class IterableState(StateRules):
    """An ``IterableDataset``: each worker's stream resumed on its own."""

    def config(self, inputs: EpochInputs) -> dp.StateDict:
        # Each worker's share of an IterableDataset depends on how many there are.
        return {"workers": total_workers(inputs)}

    def datasets_states(self, inputs: EpochInputs) -> list[OwnState] | None:
        """The own states (``state_dict()``, copied) of the dataset's copies that live on from
        epoch to epoch: the loader's dataset itself without workers, each persistent worker's
        copy (``None`` for one not started yet); ``None`` where the copies are made anew each
        epoch (or live in worker processes) or the dataset has no state of its own. Read when
        no epoch is iterating them (at an epoch's start, or after its end)."""
        if inputs.plan.worker_processes or not is_stateful(inputs.dataset):
            return None
        if inputs.plan.num_workers == 0:
            return [_own_state_or_none(inputs.dataset)]
        workers = inputs.kept.resources.workers if inputs.plan.persistent else None
        if workers is None:
            return None
        copies = workers.started_datasets()
        return [_own_state_or_none(copies[w]) if w in copies else None for w in range(inputs.plan.num_workers)]

    def progress(
        self,
        inputs: EpochInputs,
        resume: dp.StateDict | None,
        *,
        total: int | None,
        eager: Eager | None,
        indices: object,
        iterable_start: Sequence[OwnState] | None,
    ) -> StreamProgress:
        return StreamProgress(self, IterableLedger(total_workers(inputs), resume, iterable_start))


class StreamProgress(Progress):
    """An epoch whose ledger says when its streams ended: an ``IterableDataset``'s workers
    (:class:`IterableLedger`), or a ``datapipes`` graph (:class:`NodeLedger`)."""

    def __init__(self, strategy: StateRules, ledger: IterableLedger | NodeLedger) -> None:
        self.strategy = strategy
        self.ledger: IterableLedger | NodeLedger = ledger

    def running(self, state: dp.StateDict, held: int, graph_state: dp.StateDict | None, inputs: EpochInputs) -> bool:
        state.update(self.ledger.state(held))
        return bool(state.pop("all_ended"))

    def finished(self, ended: dp.StateDict, inputs: EpochInputs) -> dp.StateDict:
        state: dp.StateDict = {"config": ended["config"], "finished": True}
        datasets = self.strategy.datasets_states(inputs)
        if datasets is not None:  # the copies live on into the next epoch with these
            state["datasets"] = datasets
        state.update(generators_of(inputs))
        return state


def _own_state_or_none(dataset: UserObject) -> OwnState:
    """``dataset.state_dict()`` (copied) before its epoch's first batch, or ``None`` where it
    fails (a dataset whose state exists only once iterated): its resume then starts from a
    fresh copy, as it did without this state."""
    try:
        state = dataset.state_dict()
    except Exception:
        return None
    return snapshot(state, dataset)
