"""An epoch's random draws, made as torch makes them: the index sampler's iterator and the base
seed, in torch's order, or, for a resumed epoch, taken from the state (:func:`draw`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from torch_threadloader.graph import StartedIndices, started_indices
from torch_threadloader.resume import (
    drawn_at_iter,
    keep_sampler_epoch,
    order_rngs,
    replay_order,
    restore_generators,
    snapshot,
    stateful_sampler,
)

if TYPE_CHECKING:
    from torch_threadloader.epoch.kept import Kept
    from torch_threadloader.loader import ThreadLoader

__all__ = ["Draws", "draw"]


@dataclasses.dataclass
class Draws:
    """What an epoch drew: ``indices`` (its started index iterable, None for an iterable or a
    graph), the base seed, and what a resume needs to draw them again."""

    base_seed: int
    drew_base_seed: bool
    loader_rng: torch.Tensor | None  # the loader's generator after the draws
    indices: Any = None
    sampler_state: Any = None  # a Stateful sampler's own state before the used iter() (a copy)
    eager: dict[str, Any] | None = None  # the generators before an iter() that drew the order


def draw(loader: ThreadLoader[Any], kept: Kept, resume: Mapping[str, Any] | None) -> Draws:
    """The epoch's draws, in torch's order, for a sampler whose ``__iter__`` draws at once: its
    iterator base class calls ``iter(sampler)``, then draws the base seed (with persistent
    workers only at the loader's first ``iter()``); with workers, its ``_reset()`` then calls
    ``iter(sampler)`` again and uses that one, dropping the first. The state of the call the
    epoch uses is recorded: a Stateful sampler's own, and the generators' when that call drew
    the order (else the order is drawn at the first ``next()``, recorded by the graph's
    Sampler). A resumed epoch makes only that call, from that state, and draws nothing else:
    its base seed comes from the state, and ``load_state_dict()`` put the generators (torch's
    global one included) where they were when it was taken."""
    plan = loader._plan
    uses_sampler = plan.kind.uses_sampler
    stateful = stateful_sampler(loader) if uses_sampler else None
    with kept.lock:
        first_draw = not plan.persistent or kept.base_seed is None
    draws = Draws(base_seed=0, drew_base_seed=False, loader_rng=None)
    if uses_sampler and resume is not None:
        _replay_indices(loader, stateful, resume, draws)
    elif uses_sampler and first_draw:
        if plan.num_workers == 0:  # torch uses its first iter(sampler) without workers
            _use_call(loader, stateful, draws)
        else:
            started_indices(loader)
    _draw_base_seed(loader, kept, resume, first_draw, draws)
    draws.loader_rng = loader.generator.get_state() if loader.generator is not None else None
    if uses_sampler and draws.indices is None:
        _use_call(loader, stateful, draws)
    batches = resume.get("batches") if resume is not None else None
    if batches is not None:  # the rest of an epoch taken with another world size, dealt out
        draws.indices = StartedIndices(batches, iter(batches))
    return draws


def _replay_indices(loader: ThreadLoader[Any], stateful: Any, resume: Mapping[str, Any], draws: Draws) -> None:
    keep_sampler_epoch(loader, resume.get("order"))
    draws.sampler_state, draws.eager = resume.get("sampler_state"), resume.get("eager")
    if stateful is not None and draws.sampler_state is not None:
        stateful.load_state_dict(draws.sampler_state)
    draws.indices = replay_order(loader, draws.eager, started_indices)
    if stateful is None:
        draws.sampler_state = None


def _use_call(loader: ThreadLoader[Any], stateful: Any, draws: Draws) -> None:
    """The ``iter(sampler)`` call whose iterator the epoch uses (:func:`started_indices`), with
    what a resume needs to make it again: a Stateful sampler's own state before it (a copy),
    and the generators' states before it when it drew (see :func:`drawn_at_iter`)."""
    draws.sampler_state = snapshot(stateful.state_dict(), stateful) if stateful is not None else None
    before = order_rngs(loader)
    draws.indices = started_indices(loader)
    draws.eager = drawn_at_iter(before, order_rngs(loader))


def _draw_base_seed(
    loader: ThreadLoader[Any], kept: Kept, resume: Mapping[str, Any] | None, first: bool, draws: Draws
) -> None:
    if resume is not None:
        draws.base_seed = int(resume["base_seed"])
        draws.drew_base_seed = bool(resume.get("drew_base_seed"))
        if loader._plan.persistent:
            with kept.lock:
                kept.base_seed = draws.base_seed
        restore_generators(loader, {"loader": resume.get("loader_rng")})
    elif loader._plan.persistent:
        with kept.lock:
            if kept.base_seed is None:
                kept.base_seed = _draw_seed(loader.generator)
            draws.base_seed = kept.base_seed
        draws.drew_base_seed = first
    else:
        draws.base_seed = _draw_seed(loader.generator)
        draws.drew_base_seed = True


def _draw_seed(generator: torch.Generator | None) -> int:
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
