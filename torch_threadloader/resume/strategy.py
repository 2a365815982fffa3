"""What resume does for a dataset kind: how an epoch's progress is recorded, what its state holds.

:class:`StateRules` is the resume half of a kind's one strategy
(:class:`torch_threadloader.kinds.KindStrategy` inherits it; the loader picks the strategy once
from its plan): nothing in ``torch_threadloader.resume`` asks
which kind a loader is. Its :meth:`~StateRules.progress` makes the epoch's :class:`Progress`,
which owns the epoch's ledger. The rules:

* map-style and async (``resume.sampled``): the sampler's positions delivered, and the random
  state its order was drawn from;
* ``IterableDataset`` (``resume.iterable``): per worker, the batches delivered and the dataset
  copy's own state;
* ``datapipes`` graph (``resume.node``): the graph's own state after the last batch delivered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import datapipes as dp
from torch_threadloader.resume.data import OwnState
from torch_threadloader.resume.generators import Eager
from torch_threadloader.resume.ledgers import IterableLedger, NodeLedger, PositionLedger
from torch_threadloader.resume.order import SamplerOrder

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs
    from torch_threadloader.skip import ErrorPolicy

__all__ = ["Progress", "StateRules"]


class Progress:
    """One epoch's progress for resume, kept by its record (``EpochRecord``) under the record's
    lock: the ledger of batches delivered and what the kind adds to a state."""

    ledger: PositionLedger | IterableLedger | NodeLedger
    #: Batches carry a tag (their position, worker or graph state) to the consumer.
    tagged: bool = True
    #: The state in progress reads the epoch graph's own ``state_dict()`` (taken outside the lock).
    reads_graph: bool = False
    #: on_error: the epoch's own skip records (its ``ErrorPolicy``), which its state carries.
    errors: ErrorPolicy | None = None

    def add(self, tag: Any) -> None:
        """A batch (or its error) with ``tag`` was delivered: a :data:`~torch_threadloader.resume.ledgers.Tag`
        of the kind its ledger takes (the kind's batches carry its ledger's tags; the type says no more)."""
        self.ledger.add(tag)

    def graph_part(self, graph_state: dp.StateDict) -> dp.StateDict:
        """What :meth:`closed` keeps of the graph's state (raises for a graph without it)."""
        return graph_state

    def closed(self, part: dp.StateDict) -> None:
        """The epoch's iterator is closing, its graph in ``part`` (from :meth:`graph_part`)."""

    def graph_opened(self, state: dp.StateDict) -> None:
        """A fresh epoch's graph was opened, in ``state`` (a ``datapipes`` graph's)."""

    def running(self, state: dp.StateDict, held: int, graph_state: dp.StateDict | None, inputs: EpochInputs) -> bool:
        """Add the state of the epoch in progress to ``state`` (as it was before the ``held``
        batches a consumer holds); return whether every stream of the epoch ended."""
        raise NotImplementedError

    def finished(self, ended: dp.StateDict, inputs: EpochInputs) -> dp.StateDict:
        """The state of the epoch over (``ended`` is its state in progress), up to the base seed
        and torch's global generator, which the record adds."""
        raise NotImplementedError


class StateRules:
    """What resume does for one dataset kind; the base is a kind without a sampler."""

    #: The kind's items are read by index from the loader's sampler (map-style and async).
    uses_sampler = False

    def order(self, inputs: EpochInputs) -> SamplerOrder | None:
        """How to draw the epoch's order again elsewhere (``None``: it cannot be)."""
        return None

    def config(self, inputs: EpochInputs) -> dp.StateDict:
        """The kind's arguments a state depends on (after ``kind``, ``batch_size``, ``drop_last``)."""
        return {}

    def sampler_state(self, inputs: EpochInputs) -> dict[str, OwnState]:
        """A Stateful sampler's own state now, for a state between epochs (``{}`` without one)."""
        return {}

    def datasets_states(self, inputs: EpochInputs) -> list[OwnState] | None:
        """The own states of dataset copies that live on from epoch to epoch (``None``: none)."""
        return None

    def progress(
        self,
        inputs: EpochInputs,
        resume: dp.StateDict | None,
        *,
        total: int | None,
        eager: Eager | None,
        indices: object,
        iterable_start: Sequence[OwnState] | None,
    ) -> Progress:
        """A new epoch's progress, from a mid-epoch state ``resume`` or from its start."""
        raise NotImplementedError
