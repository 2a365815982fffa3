"""One resume strategy per dataset kind: how an epoch's progress is recorded, what its state holds.

The loader's plan (``loader._plan.kind``, a :class:`~torch_threadloader.plan.Kind`) picks the
strategy once (:func:`strategy_of`); nothing else in ``torch_threadloader.resume`` asks which
kind a loader is. A :class:`KindStrategy` is stateless (one per kind); its
:meth:`~KindStrategy.progress` makes the epoch's :class:`Progress`, which owns the epoch's
ledger. The strategies:

* map-style and async (``resume.sampled``): the sampler's positions delivered, and the random
  state its order was drawn from;
* ``IterableDataset`` (``resume.iterable``): per worker, the batches delivered and the dataset
  copy's own state;
* ``datapipes`` graph (``resume.node``): the graph's own state after the last batch delivered.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch_threadloader.plan import Kind
from torch_threadloader.resume.ledgers import IterableLedger, NodeLedger, PositionLedger

if TYPE_CHECKING:
    from torch_threadloader.loader import ThreadLoader

__all__ = ["KindStrategy", "Progress", "iterable_datasets_states", "sampler_state_of", "strategy_for", "strategy_of"]


class Progress:
    """One epoch's progress for resume, kept by its record (``EpochRecord``) under the record's
    lock: the ledger of batches delivered and what the kind adds to a state."""

    ledger: PositionLedger | IterableLedger | NodeLedger
    #: Batches carry a tag (their position, worker or graph state) to the consumer.
    tagged: bool = True
    #: The state in progress reads the epoch graph's own ``state_dict()`` (taken outside the lock).
    reads_graph: bool = False
    #: on_error: the epoch's own skip records (its ``ErrorPolicy``), which its state carries.
    errors: Any = None

    def add(self, tag: Any) -> None:
        """A batch (or its error) with ``tag`` was delivered."""
        self.ledger.add(tag)

    def graph_part(self, graph_state: Any) -> Any:
        """What :meth:`closed` keeps of the graph's state (raises for a graph without it)."""
        return graph_state

    def closed(self, part: Any) -> None:
        """The epoch's iterator is closing, its graph in ``part`` (from :meth:`graph_part`)."""

    def graph_opened(self, state: Any) -> None:
        """A fresh epoch's graph was opened, in ``state`` (a ``datapipes`` graph's)."""

    def running(self, state: dict[str, Any], held: int, graph_state: Any, loader: ThreadLoader[Any]) -> bool:
        """Add the state of the epoch in progress to ``state`` (as it was before the ``held``
        batches a consumer holds); return whether every stream of the epoch ended."""
        raise NotImplementedError

    def finished(self, ended: Mapping[str, Any], loader: ThreadLoader[Any]) -> dict[str, Any]:
        """The state of the epoch over (``ended`` is its state in progress), up to the base seed
        and torch's global generator, which the record adds."""
        raise NotImplementedError


class KindStrategy:
    """What resume does for one dataset kind; the base is a kind without a sampler."""

    #: The kind's items are read by index from the loader's sampler (map-style and async).
    uses_sampler = False

    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    def index_sampler(self, loader: ThreadLoader[Any]) -> Any:
        """The sampler (or batch sampler) the kind reads indices from; ``None`` without one."""
        return None

    def order(self, loader: ThreadLoader[Any]) -> dict[str, Any] | None:
        """How to draw the epoch's order again elsewhere (``None``: it cannot be)."""
        return None

    def config(self, loader: ThreadLoader[Any]) -> dict[str, Any]:
        """The kind's arguments a state depends on (after ``kind``, ``batch_size``, ``drop_last``)."""
        return {}

    def sampler_state(self, loader: ThreadLoader[Any]) -> dict[str, Any]:
        """A Stateful sampler's own state now, for a state between epochs (``{}`` without one)."""
        return {}

    def datasets_states(self, loader: ThreadLoader[Any]) -> list[Any] | None:
        """The own states of dataset copies that live on from epoch to epoch (``None``: none)."""
        return None

    def progress(
        self,
        loader: ThreadLoader[Any],
        resume: Mapping[str, Any] | None,
        *,
        total: int | None,
        eager: Mapping[str, Any] | None,
        indices: Any,
        iterable_start: Sequence[Any] | None,
    ) -> Progress:
        """A new epoch's progress, from a mid-epoch state ``resume`` or from its start."""
        raise NotImplementedError


@functools.cache
def _strategies() -> dict[Kind, KindStrategy]:
    # Imported here: each kind's module imports the helpers that look strategies up.
    from torch_threadloader.resume.iterable import IterableStrategy
    from torch_threadloader.resume.node import NodeStrategy
    from torch_threadloader.resume.sampled import SampledStrategy

    return {
        Kind.MAP: SampledStrategy(Kind.MAP),
        Kind.ASYNC: SampledStrategy(Kind.ASYNC, out_of_order=True),
        Kind.ITERABLE: IterableStrategy(Kind.ITERABLE),
        Kind.NODE: NodeStrategy(Kind.NODE),
    }


def strategy_for(kind: Kind | str) -> KindStrategy:
    """The strategy of ``kind`` (a :class:`Kind`, or its value as a state stores it);
    ``ValueError`` naming it for a kind there is none of."""
    return _strategies()[Kind(kind)]


def strategy_of(loader: ThreadLoader[Any]) -> KindStrategy:
    """The strategy of ``loader``'s kind, from its plan (``loader._plan.kind``)."""
    return _strategies()[loader._plan.kind]


def iterable_datasets_states(loader: ThreadLoader[Any]) -> list[Any] | None:
    """The own states of ``loader``'s dataset copies that live on from epoch to epoch (an
    ``IterableDataset``'s: see ``IterableStrategy.datasets_states``); ``None`` for none."""
    return strategy_of(loader).datasets_states(loader)


def sampler_state_of(loader: ThreadLoader[Any]) -> dict[str, Any]:
    """A Stateful sampler's own state now (``{}`` for another sampler, or a kind without one),
    for a state between epochs: the next epoch starts from it."""
    return strategy_of(loader).sampler_state(loader)
