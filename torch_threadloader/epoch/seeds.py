"""An epoch's random draws, made as torch makes them: the index sampler's iterator and the base
seed, in torch's order, or, for a resumed epoch, taken from the state (:func:`draw`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sized
from typing import TYPE_CHECKING, Protocol, cast

import torch

import datapipes as dp
from torch_threadloader.batching import fast_batches
from torch_threadloader.resume import (
    drawn_at_iter,
    keep_sampler_epoch,
    order_rngs,
    replay_order,
    restore_generators,
    snapshot,
    stateful_sampler,
)
from torch_threadloader.userdata import Indices

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["Draws", "draw"]


class _Stateful(Protocol):
    """A sampler with torch's ``Stateful`` protocol (``resume.stateful_sampler``)."""

    def state_dict(self) -> dp.StateDict: ...

    def load_state_dict(self, state_dict: dp.StateDict, /) -> None: ...


@dataclasses.dataclass
class Draws:
    """What an epoch drew: ``indices`` (its started index iterable, None for an iterable or a
    graph), the base seed, and what a resume needs to draw them again."""

    base_seed: int
    drew_base_seed: bool
    loader_rng: torch.Tensor | None  # the loader's generator after the draws
    indices: StartedIndices | None = None
    sampler_state: dp.StateDict | None = None  # a Stateful sampler's own state before the used iter() (a copy)
    eager: dp.StateDict | None = None  # the generators before an iter() that drew the order


def draw(inputs: EpochInputs, resume: dp.StateDict | None) -> Draws:
    """The epoch's draws, in torch's order, for a sampler whose ``__iter__`` draws at once: its
    iterator base class calls ``iter(sampler)``, then draws the base seed (with persistent
    workers only at the loader's first ``iter()``); with workers, its ``_reset()`` then calls
    ``iter(sampler)`` again and uses that one, dropping the first. The state of the call the
    epoch uses is recorded: a Stateful sampler's own, and the generators' when that call drew
    the order (else the order is drawn at the first ``next()``, recorded by the graph's
    Sampler). A resumed epoch makes only that call, from that state, and draws nothing else:
    its base seed comes from the state, and ``load_state_dict()`` put the generators (torch's
    global one included) where they were when it was taken."""
    plan, kept = inputs.plan, inputs.kept
    uses_sampler = plan.kind.uses_sampler
    stateful: _Stateful | None = stateful_sampler(inputs) if uses_sampler else None
    with kept.lock:
        first_draw = not plan.persistent or kept.base_seed is None
    draws = Draws(base_seed=0, drew_base_seed=False, loader_rng=None)
    if uses_sampler and resume is not None:
        _replay_indices(inputs, stateful, resume, draws)
    elif uses_sampler and first_draw:
        if plan.num_workers == 0:  # torch uses its first iter(sampler) without workers
            _use_call(inputs, stateful, draws)
        else:
            started_indices(inputs)
    _draw_base_seed(inputs, resume, first_draw, draws)
    draws.loader_rng = inputs.generator.get_state() if inputs.generator is not None else None
    if uses_sampler and draws.indices is None:
        _use_call(inputs, stateful, draws)
    batches = resume.get("batches") if resume is not None else None
    if batches is not None:  # the rest of an epoch taken with another world size, dealt out
        draws.indices = StartedIndices(batches, iter(batches))
    return draws


def _replay_indices(inputs: EpochInputs, stateful: _Stateful | None, resume: dp.StateDict, draws: Draws) -> None:
    keep_sampler_epoch(inputs, resume.get("order"))
    draws.sampler_state, draws.eager = resume.get("sampler_state"), resume.get("eager")
    if stateful is not None and draws.sampler_state is not None:
        stateful.load_state_dict(draws.sampler_state)
    draws.indices = replay_order(inputs, draws.eager, started_indices)
    if stateful is None:
        draws.sampler_state = None


def _use_call(inputs: EpochInputs, stateful: _Stateful | None, draws: Draws) -> None:
    """The ``iter(sampler)`` call whose iterator the epoch uses (:func:`started_indices`), with
    what a resume needs to make it again: a Stateful sampler's own state before it (a copy),
    and the generators' states before it when it drew (see :func:`drawn_at_iter`)."""
    draws.sampler_state = snapshot(stateful.state_dict(), stateful) if stateful is not None else None
    before = order_rngs(inputs)
    draws.indices = started_indices(inputs)
    draws.eager = drawn_at_iter(before, order_rngs(inputs))


def _draw_base_seed(inputs: EpochInputs, resume: dp.StateDict | None, first: bool, draws: Draws) -> None:
    kept = inputs.kept
    if resume is not None:
        draws.base_seed = int(resume["base_seed"])
        draws.drew_base_seed = bool(resume.get("drew_base_seed"))
        if inputs.plan.persistent:
            with kept.lock:
                kept.base_seed = draws.base_seed
        restore_generators(inputs, {"loader": resume.get("loader_rng")})
    elif inputs.plan.persistent:
        with kept.lock:
            if kept.base_seed is None:
                kept.base_seed = _draw_seed(inputs.generator)
            draws.base_seed = kept.base_seed
        draws.drew_base_seed = first
    else:
        draws.base_seed = _draw_seed(inputs.generator)
        draws.drew_base_seed = True


def _draw_seed(generator: torch.Generator | None) -> int:
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def started_indices(inputs: EpochInputs) -> StartedIndices:
    """``iter()`` of the loader's index sampler, called now: torch calls it at ``iter(loader)``,
    before it draws the base seed, so a sampler whose ``__iter__`` draws at once draws first."""
    index_sampler = inputs.batch_sampler if inputs.batch_sampler is not None else inputs.sampler
    source = fast_batches(index_sampler)
    return StartedIndices(source, iter(source))


class StartedIndices:
    """An index sampler's iterator, already made, as a one-epoch iterable: ``sampler`` (for a
    checkpoint to find the sampler's generator) and ``len()`` are the sampler's (a ``TypeError``
    where it has none)."""

    def __init__(self, sampler: Iterable[Indices], iterator: Iterator[Indices]) -> None:
        self.sampler = sampler
        self._iterator: Iterator[Indices] | None = iterator

    def __iter__(self) -> Iterator[Indices]:
        iterator, self._iterator = self._iterator, None
        if iterator is None:
            raise RuntimeError("an epoch's index iterator is iterated once")
        return iterator

    def __len__(self) -> int:
        return len(cast(Sized, self.sampler))

    def started(self) -> bool:
        """Whether the epoch has taken the iterator (its sampler's order is being drawn)."""
        return self._iterator is None
