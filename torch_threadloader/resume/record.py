"""What one epoch delivered: the record ``state_dict()`` reads, kept apart from the epoch's iterator.

The record holds what the epoch drew (base seed, the loader generator's state) and the kind's
:class:`~torch_threadloader.resume.strategy.Progress` (chosen once, from the loader's plan),
which holds the ledger of batches delivered. The consumer's thread adds to it; ``state()`` may
run on any thread (under ``lock``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import torch

import datapipes as dp
from torch_threadloader.resume.config import loader_config
from torch_threadloader.resume.data import OwnState, plain
from torch_threadloader.resume.fetcher import held_by
from torch_threadloader.resume.generators import Eager, generators_of, global_rng_of
from torch_threadloader.resume.ledgers import IterableLedger, NodeLedger, PositionLedger
from torch_threadloader.resume.strategy import Progress, StateRules
from torch_threadloader.tags import Tag

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["EpochRecord"]


class GraphIterator(Protocol):
    """The epoch's graph iterator, as the record reads it: its state now."""

    def state_dict(self) -> dp.StateDict: ...


class EpochRecord:
    """What one epoch delivered, kept by the loader apart from the epoch's iterator (so a
    state can be taken after the iterator is gone, and holding it keeps no thread alive).
    The consumer's thread adds to it; ``state()`` may run on any thread (``lock``)."""

    def __init__(
        self,
        inputs: EpochInputs,
        rules: StateRules,
        resume: dp.StateDict | None,
        *,
        base_seed: int,
        drew_base_seed: bool,
        loader_rng: torch.Tensor | None,
        sampler_state: OwnState,
        fetcher: weakref.ref[object] | None,
        total: int | None = None,
        eager: Eager | None = None,
        indices: object = None,
        iterable_start: Sequence[OwnState] | None = None,
    ) -> None:
        self.rules = rules
        self.kind: str = inputs.plan.kind.value
        self.lock = threading.Lock()
        self.resume = dict(resume) if resume is not None else None
        self.meta: dp.StateDict = {
            "base_seed": base_seed,
            "drew_base_seed": drew_base_seed,
            "loader_rng": plain(loader_rng),
            "sampler_state": sampler_state,  # a copy already
        }
        if inputs.plan.kind.uses_sampler:
            self.meta["order"] = rules.order(inputs)
        if resume is not None and resume.get("resharded") is not None:
            self.meta["resharded"] = resume["resharded"]
            self.meta["order"] = None  # the epoch's batches are dealt out from the state, not drawn
        self.fetcher = fetcher
        self.finished = False
        #: ``per_sample_rng``: the epoch number its items draw for (set by the epoch; None without).
        self.sample_epoch: int | None = None
        self.frozen = False  # the epoch's iterator closed (see freeze)
        self.it: GraphIterator | None = None
        self.progress: Progress = rules.progress(
            inputs, resume, total=total, eager=eager, indices=indices, iterable_start=iterable_start
        )

    @property
    def ledger(self) -> PositionLedger | IterableLedger | NodeLedger:
        """The epoch's ledger of batches delivered (its progress's)."""
        return self.progress.ledger

    @property
    def frontier(self) -> int:
        """The lowest batch position not yet delivered, for a ledger of positions (map-style
        and async, the ones a byte budget serves); 0 for any other."""
        ledger = self.progress.ledger
        return ledger.frontier if isinstance(ledger, PositionLedger) else 0

    @property
    def tagged(self) -> bool:
        """The epoch's batches carry a tag to the consumer (see :meth:`add`)."""
        return self.progress.tagged

    def resume_part(self) -> dp.StateDict | None:
        """The mid-epoch state this epoch resumes from (``None`` for a fresh one)."""
        return self.resume

    def attach(self, it: GraphIterator) -> None:
        """The epoch's graph iterator, read for the sampler's state while it runs."""
        self.it = it

    def freeze(self) -> None:
        """The epoch's iterator is closing: keep what its graph says of the sampler now (a
        closed sampler forgets the positions it was to pass over)."""
        with self.lock:
            self.frozen = True
        it = self.it
        if it is None or not self.progress.reads_graph:
            return
        try:
            part = self.progress.graph_part(it.state_dict())
        except Exception:  # a graph that could not even open: nothing delivered
            self.it = None
            return
        with self.lock:
            self.progress.closed(part)
            self.it = None

    def add(self, tag: Tag) -> None:
        """The batch (or error) tagged ``tag`` was delivered."""
        with self.lock:
            self.progress.add(tag)

    def finish(self) -> None:
        """The epoch's graph ran out; not after the epoch was closed (a ``next()`` after
        ``close()`` ends at once, and the epoch is as far as it got)."""
        with self.lock:
            if not self.frozen:
                self.finished = True

    def state(self, inputs: EpochInputs) -> dp.StateDict:
        """The loader's state now: the epoch in progress, or, once it is over, the state
        between it and the next (drawn from the generators as the epoch left them)."""
        held = held_by(self.fetcher)
        it = self.it
        # Outside our lock: the graph has its own.
        graph_state = it.state_dict() if self.progress.reads_graph and it is not None else None
        with self.lock:
            state: dp.StateDict = {"config": loader_config(inputs, self.rules)}
            ended = self.progress.running(state, held, graph_state, inputs)
            if self.finished or ended:
                return self._between(state, inputs)
            state["finished"] = False
            state.update(self.meta)
            state.update(global_rng_of(inputs, state.get("eager")))
            return state

    def _between(self, ended: dp.StateDict, inputs: EpochInputs) -> dp.StateDict:
        """The state once the epoch is over: the next ``iter()`` is a new epoch."""
        state = self.progress.finished(ended, inputs)
        if inputs.plan.persistent:
            state["base_seed"] = self.meta["base_seed"]
        state.update(global_rng_of(inputs, state.get("eager")))
        return state

    def graph_opened(self, state: dp.StateDict) -> None:
        """A fresh epoch's graph (``datapipes`` node as the dataset) was opened, in ``state``: the
        state before its first batch (a graph keeps its generators across epochs, so ``{}``,
        a fresh graph's, is right only for its first epoch)."""
        with self.lock:
            self.progress.graph_opened(state)

    @staticmethod
    def generators_of(inputs: EpochInputs) -> dp.StateDict:
        """The generators of a state taken with no epoch record (before the loader's first
        ``iter()``): the loader's and its sampler's (``None`` without one), and torch's global
        one when the loader draws from it, so that the first epoch of a loader that loads the
        state draws as this one's would (its order from a global seed, say)."""
        return {**generators_of(inputs), **global_rng_of(inputs)}
