"""The generators a state records and puts back: the loader's, its sampler's, torch's global one.

Where the order is drawn (see ``docs/architecture.md``, "Resume"): torch calls
``iter(sampler)`` at ``iter(inputs)``; a sampler may draw its whole order there (*eager*,
found by :func:`drawn_at_iter` comparing :func:`order_rngs` before and after the call), and a
resume then makes only that call, from the generators' states before it (:func:`replay_order`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import torch

from datapipes._rng import state_bytes
from torch_threadloader.resume.data import RngState, as_tensor_state, is_stateful, plain
from torch_threadloader.userdata import UserObject

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = [
    "Eager",
    "draws_from_global",
    "drawn_at_iter",
    "generators_of",
    "global_rng_of",
    "order_rngs",
    "replay_epoch",
    "replay_order",
    "restore_generators",
    "sampler_generator",
    "stateful_sampler",
    "uses_global_rng",
]

#: The states (as ``bytes``) before an ``iter(sampler)`` that drew the order of the generators it
#: drew from, by name (``"sampler"``, ``"global"``): :func:`drawn_at_iter`.
Eager: TypeAlias = Mapping[str, RngState]
_T = TypeVar("_T")


def sampler_generator(sampler: UserObject) -> torch.Generator | None:
    """The ``torch.Generator`` a sampler (or one it wraps, under ``.sampler``) draws from."""
    s = sampler
    for _ in range(8):
        if s is None:
            return None
        gen = getattr(s, "generator", None)
        if isinstance(gen, torch.Generator):
            return gen
        s = getattr(s, "sampler", None)
    return None


def _indices_of(inputs: EpochInputs) -> UserObject:
    """The sampler (or batch sampler) the loader's kind reads indices from (``None`` for a kind
    that reads none)."""
    return inputs.index_sampler if inputs.plan.kind.uses_sampler else None


def _kind_sampler_generator(inputs: EpochInputs) -> torch.Generator | None:
    """The generator of the sampler the loader's kind reads indices from (``None`` without one)."""
    return sampler_generator(_indices_of(inputs))


def stateful_sampler(inputs: EpochInputs) -> UserObject:
    """The loader's batch sampler, else its sampler, when it has ``state_dict``/``load_state_dict``."""
    for sampler in (inputs.batch_sampler, inputs.sampler):
        if sampler is not None and is_stateful(sampler):
            return sampler
    return None


def restore_generators(inputs: EpochInputs, generators: Mapping[str, RngState | None] | None) -> None:
    """Put the loader's (``"loader"``) and its sampler's (``"sampler"``) generators in a saved state."""
    if not generators:
        return
    own, loader_state, sampler_state = inputs.generator, generators.get("loader"), generators.get("sampler")
    if loader_state is not None and own is not None:
        own.set_state(as_tensor_state(loader_state))
    if sampler_state is not None:
        sampler = _kind_sampler_generator(inputs)
        if sampler is not None and sampler is not own:
            sampler.set_state(as_tensor_state(sampler_state))


def generators_of(inputs: EpochInputs) -> dict[str, dict[str, bytes | None]]:
    """The states of the loader's and its sampler's generators now (``None`` without one)."""
    own = inputs.generator
    sampler = _kind_sampler_generator(inputs)
    return {
        "generators": {
            "loader": plain(own.get_state()) if own is not None else None,
            "sampler": plain(sampler.get_state()) if sampler is not None and sampler is not own else None,
        }
    }


def uses_global_rng(inputs: EpochInputs) -> bool:
    """Whether the loader draws from torch's global generator (its base seed without
    ``generator=``, or a sampler without a generator of its own)."""
    if inputs.generator is None:
        return True
    return inputs.plan.kind.uses_sampler and _kind_sampler_generator(inputs) is None


def draws_from_global(inputs: EpochInputs, eager: Eager | None) -> bool:
    """Whether the loader draws from torch's global generator (:func:`uses_global_rng`), its
    sampler's ``__iter__`` included (``eager``, from :func:`drawn_at_iter`)."""
    return uses_global_rng(inputs) or bool(eager and eager.get("global") is not None)


def global_rng_of(inputs: EpochInputs, eager: Eager | None = None) -> dict[str, bytes]:
    """torch's global generator state now, for a loader that draws from it
    (:func:`draws_from_global`): a resume puts it back, so the run goes on drawing as the
    uninterrupted one did (Lightning saves no RNG)."""
    return {"global_rng": plain(torch.get_rng_state())} if draws_from_global(inputs, eager) else {}


def replay_epoch(inputs: EpochInputs, rng: RngState | None) -> None:
    """Draw a finished epoch's order again from its start state and run it out, so that the
    sampler's generator ends where the epoch left it (a sampler without one is skipped)."""
    index_sampler = _indices_of(inputs)
    gen = sampler_generator(index_sampler)
    if gen is None or rng is None:
        return
    with torch.random.fork_rng(devices=[]):  # the global generator is the state's (global_rng)
        gen.set_state(as_tensor_state(rng))
        for _ in index_sampler:
            pass


def order_rngs(inputs: EpochInputs) -> dict[str, torch.Tensor | None]:
    """The states of the generators a sampler may draw its order from: its own (or the one it
    wraps; ``None`` without one) and torch's global one."""
    gen = sampler_generator(inputs.index_sampler)
    return {"sampler": gen.get_state() if gen is not None else None, "global": torch.get_rng_state()}


def drawn_at_iter(
    before: Mapping[str, torch.Tensor | None], after: Mapping[str, torch.Tensor | None]
) -> dict[str, bytes] | None:
    """``None`` when no generator moved between :func:`order_rngs` ``before`` and ``after`` an
    ``iter(sampler)`` call (the order is drawn at the first ``next()``); else the states
    before it of those that moved (as ``bytes``): the call drew the order at once."""
    moved: dict[str, bytes] = {}
    for name, state in before.items():
        now = after[name]
        if state is not None and (now is None or not torch.equal(state, now)):
            moved[name] = state_bytes(state)
    return moved or None


def replay_order(inputs: EpochInputs, eager: Eager | None, start: Callable[[EpochInputs], _T]) -> _T:
    """``start(inputs)`` (the epoch's ``iter(sampler)`` call) for a resumed epoch: for an order
    that call drew (``eager``, from :func:`drawn_at_iter`), made from the generators' states
    before it. The sampler's generator is left as the call leaves it (as the uninterrupted
    epoch's was); torch's global one as it was (``load_state_dict()`` put it back)."""
    if not eager:
        return start(inputs)
    with torch.random.fork_rng(devices=[]):
        if eager.get("global") is not None:
            torch.set_rng_state(as_tensor_state(eager["global"]))
        gen = sampler_generator(inputs.index_sampler)
        if gen is not None and eager.get("sampler") is not None:
            gen.set_state(as_tensor_state(eager["sampler"]))
        return start(inputs)
