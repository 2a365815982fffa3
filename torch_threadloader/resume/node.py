"""Resume of a ``datapipes`` graph given as the dataset: the graph's own state.

A state holds the graph's ``state_dict()`` after the last batch delivered; a graph keeps its
generators across epochs, so a finished state holds it too (loaded, it draws the next epoch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.resume.data import OwnState
from torch_threadloader.resume.generators import Eager, generators_of
from torch_threadloader.resume.iterable import StreamProgress
from torch_threadloader.resume.ledgers import NodeLedger
from torch_threadloader.resume.strategy import StateRules

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["NodeProgress", "NodeState"]


class NodeState(StateRules):
    """A ``datapipes`` graph: progress by the graph's state after each batch."""

    def progress(
        self,
        inputs: EpochInputs,
        resume: dp.StateDict | None,
        *,
        total: int | None,
        eager: Eager | None,
        indices: object,
        iterable_start: Sequence[OwnState] | None,
    ) -> NodeProgress:
        # A fresh epoch's start is the graph's state once opened (graph_opened).
        return NodeProgress(self, NodeLedger(resume["graph"] if resume else {}))


class NodeProgress(StreamProgress):
    """A graph's states after the batches delivered (:class:`NodeLedger`)."""

    ledger: NodeLedger

    def graph_opened(self, state: dp.StateDict) -> None:
        """A fresh epoch's graph was opened in ``state``: the state before its first batch (a
        graph keeps its generators across epochs, so ``{}``, a fresh graph's, is right only for
        its first epoch)."""
        if not self.ledger.recent:
            self.ledger.last = (state, False)

    def finished(self, ended: dp.StateDict, inputs: EpochInputs) -> dp.StateDict:
        # Its generators are in the graph's state: loaded, they draw the next epoch.
        state: dp.StateDict = {"config": ended["config"], "finished": True, "graph": ended["graph"]}
        state.update(generators_of(inputs))
        return state
