"""A map-style epoch's order: how to draw it again (torch's samplers), what its Sampler resumes from."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeAlias

import torch

import datapipes as dp
from torch_threadloader.resume.data import RngState, as_tensor_state

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = [
    "SamplerOrder",
    "describe_sampler_order",
    "keep_sampler_epoch",
    "replay_batches",
    "sampler_resume",
    "sampler_state_in",
]

#: How to draw an epoch's order again (:func:`describe_sampler_order`): the sampler's ``type``
#: (``"distributed"``, ``"random"``, ``"sequential"``) and its arguments, numbers and flags.
SamplerOrder: TypeAlias = dict[str, str | int]


def describe_sampler_order(inputs: EpochInputs) -> SamplerOrder | None:
    """How to draw the epoch's order of the loader's sampler again elsewhere: torch's standard
    samplers under the default ``BatchSampler`` (``None`` for any other)."""
    from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

    if type(inputs.batch_sampler) is not BatchSampler:
        return None
    s = inputs.sampler
    if type(s) is DistributedSampler:
        return {
            "type": "distributed",
            "length": len(s.dataset),  # type: ignore[arg-type]
            "num_replicas": s.num_replicas,
            "rank": s.rank,
            "shuffle": s.shuffle,
            "seed": s.seed,
            "epoch": s.epoch,
            "drop_last": s.drop_last,
        }
    if type(s) is RandomSampler:
        return {
            "type": "random",
            "length": len(s.data_source),
            "replacement": s.replacement,
            "num_samples": s.num_samples,
            "generator": s.generator is not None,
        }
    if type(s) is SequentialSampler:
        return {"type": "sequential", "length": len(s.data_source)}
    return None


def replay_batches(order: dp.StateDict, rng: RngState, batch_size: int, drop_last: bool) -> list[list[int]]:
    """The index batches of the epoch ``order`` and ``rng`` describe."""
    from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

    data = range(int(order["length"]))
    kind = order["type"]
    if kind == "distributed":
        sampler: DistributedSampler[int] = DistributedSampler(
            data,  # type: ignore[arg-type]
            num_replicas=order["num_replicas"],
            rank=order["rank"],
            shuffle=order["shuffle"],
            seed=order["seed"],
            drop_last=order["drop_last"],
        )
        sampler.set_epoch(order["epoch"])
        indices = list(sampler)
    elif kind == "random" and order["generator"]:
        generator = torch.Generator()
        generator.set_state(as_tensor_state(rng))
        indices = list(RandomSampler(data, order["replacement"], order["num_samples"], generator=generator))
    elif kind == "random":
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(as_tensor_state(rng))
            indices = list(RandomSampler(data, order["replacement"], order["num_samples"]))
    else:
        indices = list(SequentialSampler(data))
    return [list(b) for b in BatchSampler(indices, batch_size, drop_last)]


def keep_sampler_epoch(inputs: EpochInputs, order: dp.StateDict | None) -> None:
    """A resumed epoch's ``DistributedSampler`` draws the order of the epoch the state was taken
    in (``order`` from :func:`describe_sampler_order`): where ``set_epoch()`` was not called with it
    before ``iter()``, it is set, with a warning (the order would not be the one the delivered
    batches came from: samples repeated and missed)."""
    from torch.utils.data import DistributedSampler

    sampler = inputs.sampler
    if not order or order.get("type") != "distributed" or type(sampler) is not DistributedSampler:
        return
    saved = int(order["epoch"])
    if sampler.epoch != saved:
        warnings.warn(
            f"the DistributedSampler's epoch is {sampler.epoch} and the state was taken in its epoch {saved}: the "
            f"resumed epoch draws epoch {saved}'s order (set_epoch({saved}) is called); call set_epoch() with the "
            "epoch being resumed before iter(), as the run that took the state did",
            RuntimeWarning,
            stacklevel=4,
        )
        sampler.set_epoch(saved)


def sampler_resume(resume: dp.StateDict) -> dp.StateDict:
    """What a resumed map-style epoch's ``datapipes.Sampler`` loads: the positions to pass
    over and the random state its order is drawn from, except for an order the sampler drew
    at ``iter()`` (``"eager"``), which the loader has drawn again before the graph opens."""
    state = {"yielded": resume["frontier"], "skip": resume["done"], "drawn": resume.get("drawn", True)}
    if not resume.get("eager"):
        state["rng"] = resume["rng"]
        if resume.get("rng_global") is not None:
            state["global_rng"] = resume["rng_global"]
    return state


def sampler_state_in(graph_state: object) -> dp.StateDict:
    """The ``datapipes.Sampler`` state nested (under ``"source"``) in a map-style graph's."""
    state = graph_state
    while isinstance(state, Mapping) and "rng" not in state:
        state = state.get("source")
    if not isinstance(state, Mapping):
        raise RuntimeError(f"no sampler state in the epoch's graph state {graph_state!r}")
    return dict(state)
