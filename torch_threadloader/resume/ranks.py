"""A state across ranks: gathered from every rank of a process group, this rank's part picked,
and a map-style epoch dealt out again to another number of ranks (:func:`reshard`).

The process group's rank and size, and the collective, are read through this module's
``_rank_and_world`` and ``_all_gather``, which a test simulating ranks in one process sets.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

import datapipes as dp
from torch_threadloader.plan import Kind
from torch_threadloader.resume.config import WORLD_DEPENDENT, check_config
from torch_threadloader.resume.data import FORMAT
from torch_threadloader.resume.order import replay_batches

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["gather_ranks", "pick_rank", "rank_and_world", "reshard"]


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size of its process group (``(0, 1)`` without one)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_gather(state: dp.StateDict, rank: int, world: int) -> list[dp.StateDict | None]:
    """Every rank's ``state`` (a collective: every rank calls it)."""
    import torch.distributed as dist

    states: list[dp.StateDict | None] = [None] * world
    dist.all_gather_object(states, state)
    return states


#: Read when called (a test simulating ranks in one process sets them): see the module.
_rank_and_world = rank_and_world
_all_gather = all_gather


def _group() -> types.ModuleType:
    return sys.modules[__name__]


def gather_ranks(local: dp.StateDict, *, gather: bool | None = None) -> dp.StateDict:
    """``local`` as a state; in a process group of several ranks, every rank's (a collective),
    unless ``gather`` is False (then this rank's, marked with its rank)."""
    state = {"format": FORMAT, **local}
    rank, world = _group()._rank_and_world()
    if world == 1:
        return state
    if gather is False:
        return {**state, "rank": rank, "world_size": world}
    return {"format": FORMAT, "world_size": world, "ranks": _group()._all_gather(state, rank, world)}


def pick_rank(state: object, inputs: EpochInputs, config: dp.StateDict) -> dp.StateDict:
    """This rank's part of a state (the state itself when it was taken without a process
    group), checked against the loader's arguments (``config``, its :func:`loader_config`). Taken with another world size, the rest of
    a map-style epoch is dealt out again (:func:`reshard`)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state_dict must be a mapping from ThreadLoader.state_dict(), got {type(state).__name__}")
    if state.get("format") != FORMAT:
        raise ValueError(
            f"state_dict is not a ThreadLoader state (format {state.get('format')!r}, expected {FORMAT!r})"
        )
    rank, world = _group()._rank_and_world()
    if state.get("ranks") is None and state.get("rank") is not None:  # one rank's, gather=False
        if int(state["rank"]) != rank or int(state.get("world_size", 1)) != world:
            raise ValueError(
                f"state_dict is rank {state['rank']} of {state.get('world_size')}'s (taken with gather=False) and "
                f"this is rank {rank} of {world}: load each rank's own state"
            )
        local = {k: v for k, v in state.items() if k not in ("rank", "world_size")}
        check_config(local, config)
        return local
    ranks = list(state["ranks"]) if state.get("ranks") is not None else [dict(state)]
    if len(ranks) == world:
        local = dict(ranks[rank])
        if local.get("resharded") is not None and not local.get("finished", True):
            resharded = local["resharded"]
            if int(resharded["world_size"]) != world:
                raise ValueError("a state taken after a world-size change resumes with that world size only")
            again = reshard(resharded["from"], rank, world, inputs, config)
            again.update(frontier=local["frontier"], done=local["done"])
            return again
        check_config(local, config)
        return local
    if all(r.get("finished", True) for r in ranks):
        local = dict(ranks[0])
        check_config(local, config, ignore=WORLD_DEPENDENT)
        return local
    return reshard({"format": FORMAT, "ranks": ranks}, rank, world, inputs, config)


def _reads_sampler(config: dp.StateDict) -> bool:
    """Whether a saved config's kind reads a sampler (a kind there is none of does not)."""
    try:
        return Kind(config.get("kind", "")).uses_sampler
    except ValueError:
        return False


def _delivered(state: dp.StateDict) -> set[int]:
    out = set(range(int(state["frontier"])))
    for start, stop in state["done"]:
        out.update(range(int(start), int(stop)))
    return out


def reshard(state: dp.StateDict, rank: int, world: int, inputs: EpochInputs, config: dp.StateDict) -> dp.StateDict:
    """The rest of a map-style epoch taken on another number of ranks, dealt out to
    ``world`` ranks: every sample no rank delivered, once, across the ranks (order is not
    kept). Each rank gets as many batches as its loader has left by Lightning's count (its
    ``len()`` minus the batches the first old rank delivered), so that every rank steps as
    often; the samples are spread evenly over them (sizes may differ from ``batch_size``)."""
    ranks = list(state["ranks"])
    old = f"{len(ranks)} rank{'s' if len(ranks) > 1 else ''}"
    for r in ranks:
        if r.get("config", {}).get("max_batch_cost") is not None:
            raise ValueError(
                f"state_dict was taken by {old} and this process group has {world}: a mid-epoch state of "
                "max_batch_cost records the samples each rank delivered, in batches agreed across the ranks; "
                "resume it on as many ranks"
            )
        if r.get("config", {}).get("defer_stragglers"):
            raise ValueError(
                f"state_dict was taken by {old} and this process group has {world}: a mid-epoch state of "
                "defer_stragglers=True records the samples each rank delivered, in its own order; resume it "
                "on as many ranks"
            )
        if not _reads_sampler(r.get("config", {})) or r.get("order") is None:
            raise ValueError(
                f"state_dict was taken by {old} and this process group has {world}: a mid-epoch resume with "
                "another world size needs a map-style dataset with torch's SequentialSampler, RandomSampler or "
                "DistributedSampler and the default BatchSampler"
            )
        check_config(r, config, ignore=WORLD_DEPENDENT)
    delivered: set[int] = set()
    left: list[int] = []
    for r in ranks:
        done = _delivered(r)
        config = r["config"]
        for position, batch in enumerate(
            replay_batches(r["order"], r["rng"], config["batch_size"], config["drop_last"])
        ):
            (delivered.update if position in done else left.extend)(batch)
    remaining = list(dict.fromkeys(i for i in left if i not in delivered))
    steps_done = len(_delivered(ranks[0]))
    steps = len(inputs.index_sampler) - steps_done
    if steps < 1 and remaining:
        warnings.warn(
            f"state_dict was taken by {old} after {steps_done} batches, and each of this process group's {world} "
            f"ranks has {len(inputs.index_sampler)} in an epoch: by that count the epoch is over, so the "
            f"{len(remaining)} samples no rank delivered are dealt out as one batch per rank (a trainer that "
            "counts the epoch as over may not ask for it)",
            RuntimeWarning,
            stacklevel=3,
        )
    steps = max(steps, 1)
    mine = remaining[rank::world]
    batches = [b.tolist() for b in torch.tensor(mine, dtype=torch.int64).tensor_split(steps) if len(b)]
    first = ranks[0]
    # The skips of the epoch so far go on with the new first rank (errors() reports each once).
    carried = [e for r in ranks for e in r.get("errors", ())] if rank == 0 else []
    return {
        "errors": carried,
        "config": dict(config),
        "finished": False,
        "frontier": 0,
        "done": [],
        "rng": first["rng"],
        "base_seed": first["base_seed"],
        "drew_base_seed": first.get("drew_base_seed", True),
        "loader_rng": first.get("loader_rng"),
        "sampler_state": None,
        "resharded": {"from": {"format": FORMAT, "ranks": ranks}, "world_size": world},
        "batches": batches,
    }
