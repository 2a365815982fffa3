"""The arguments a state depends on, and the check that refuses a state taken with others."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import datapipes as dp
    from torch_threadloader.inputs import EpochInputs
    from torch_threadloader.resume.strategy import StateRules

__all__ = ["WORLD_DEPENDENT", "check_config", "loader_config"]


def loader_config(inputs: EpochInputs, rules: StateRules) -> dp.StateDict:
    """The arguments a state depends on; a state is refused by a loader whose differ. Its
    ``kind`` is the plan's ``Kind``'s value (a state is plain data); the rest is the kind's own
    (``rules``: the kind's :meth:`~torch_threadloader.resume.strategy.StateRules.config`)."""
    config: dp.StateDict = {
        "kind": inputs.plan.kind.value,
        "batch_size": inputs.plan.batch_size,
        "drop_last": inputs.plan.drop_last,
    }
    config.update(rules.config(inputs))
    return config


#: Config keys that a world-size change may change (Lightning injects a DistributedSampler
#: with more than one rank, and each rank has its share of the batches).
WORLD_DEPENDENT = ("batches", "sampler", "order", "sampler_generator")


#: Config keys recorded only when on (states taken without them stay as they were).
ABSENT_IS_OFF = ("defer_stragglers", "max_batch_cost")


def check_config(state: dp.StateDict, config: dp.StateDict, ignore: tuple[str, ...] = ()) -> None:
    """Refuse (``ValueError`` naming each difference) a state taken with other arguments than ``config``."""
    saved = state.get("config")
    if not isinstance(saved, Mapping):
        raise ValueError("state_dict has no 'config': it is not a ThreadLoader.state_dict()")
    # A key the saved config lacks was not recorded by the version that saved it: not compared.
    differ = [
        f"{key}={saved.get(key)!r} there, {config.get(key)!r} here"
        for key in sorted(saved)
        if key not in ignore and saved.get(key) != config.get(key)
    ]
    # A mode recorded only when on: its absence there is the mode off.
    differ += [f"{key}=False there, True here" for key in ABSENT_IS_OFF if config.get(key) and key not in saved]
    if differ:
        hint = ""
        if any(d.startswith("workers=") for d in differ):
            hint = (
                " (an IterableDataset is resumed per worker: its own state per worker copy, or the items each"
                " worker read, so num_workers must be the same)"
            )
        raise ValueError("state_dict comes from a ThreadLoader with other arguments: " + "; ".join(differ) + hint)
