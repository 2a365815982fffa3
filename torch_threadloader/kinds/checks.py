"""The loader's settings checked against its dataset's kind (:func:`check_settings`), and a
setting set after construction checked as the constructor checks it (:func:`checked_setting`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from datapipes.dispatch.stall import check_stall_after
from torch_threadloader.budget import ByteBudget
from torch_threadloader.kinds import by_cost, stragglers
from torch_threadloader.kinds.base import KindStrategy
from torch_threadloader.processes import check_process_affinity, check_process_nice
from torch_threadloader.userdata import UserObject
from torch_threadloader.worker_info import check_worker_copy

if TYPE_CHECKING:
    from torch_threadloader.plan import Settings

__all__ = ["check_positive", "check_settings", "checked_setting"]


def check_settings(loader: Settings, strategy: KindStrategy, *, skips: bool) -> None:
    """Refuse, with a ``ValueError`` naming the argument, a setting the dataset's kind
    (``strategy``) does not allow (``skips``: ``on_error`` replaces a failed sample)."""
    if loader.item_concurrency > 1 and strategy.item_concurrency_refusal is not None:
        raise ValueError(
            f"item_concurrency={loader.item_concurrency} does not apply to {strategy.item_concurrency_refusal}"
            "; leave item_concurrency=1"
        )
    if loader.per_sample_rng and (not strategy.per_item_threads or loader.worker_processes):
        raise ValueError(
            "per_sample_rng=True applies to map-style datasets with a sync __getitem__ loaded by threads (each "
            "dataset[i] call runs under the sample's generator on its thread); this dataset is "
            f"{strategy.kind.value!r}{' with worker_processes' if loader.worker_processes else ''}: leave per_sample_rng=False"
        )
    if loader.worker_processes and not strategy.runs_in_processes:
        raise ValueError(
            "worker_processes does not apply to a datapipes graph as the dataset: a graph runs its own "
            "threads once per epoch; leave worker_processes=0"
        )
    if loader.max_bytes_in_flight is not None and (not strategy.per_item_threads or loader.batch_sampler is None):
        raise ValueError(
            "max_bytes_in_flight applies to map-style datasets with a sync __getitem__ (their worker threads "
            f"charge each item as they fetch it), loaded in batches; this dataset is {strategy.kind.value!r}"
            f"{'' if loader.batch_sampler is not None else ', without batches (batch_size=None)'}"
        )
    _check_stragglers(loader, strategy, skips)
    by_cost.check_cost_settings(loader, strategy, skips=skips)
    if skips and (not strategy.skippable or loader.batch_sampler is None):
        raise ValueError(
            f"on_error={loader.on_error!r} needs a map-style dataset loaded in batches: a skipped sample is replaced "
            "by another of its batch (an IterableDataset's items have no index to skip, and a lone sample has "
            "nothing to take its place)"
        )


def _check_stragglers(loader: Settings, strategy: KindStrategy, skips: bool) -> None:
    """``defer_stragglers=True``: refused where it does not apply, and a window too small."""
    if not loader.defer_stragglers:
        return
    why = stragglers.refusal(loader, strategy, skips=skips)
    if why is not None:
        raise ValueError(f"defer_stragglers=True does not apply to {why}")
    stragglers.check_window(loader, strategy)


def checked_setting(loader: Settings, name: str, value: UserObject) -> UserObject:
    """``value`` for the setting ``name`` set after construction (as the user gave it), checked
    as the constructor checks it (and normalised as it normalises it)."""
    normalise = _NORMALISED.get(name)
    if normalise is not None:
        return normalise(value)
    if name == "num_workers":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"num_workers option should be non-negative, got {value!r}")
    elif name == "item_concurrency":
        check_positive(name, value)
    elif name in ("per_sample_rng", "own_random_state") and not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    elif name == "max_bytes_in_flight" and value is not None:
        ByteBudget(value)
    elif name == "process_nice":
        return check_process_nice(value, loader.worker_processes)
    elif name == "process_affinity":
        return check_process_affinity(value, loader.worker_processes)
    return value


#: The settings checked and normalised by one function of the value alone.
_NORMALISED: dict[str, Callable[[UserObject], UserObject]] = {
    "worker_copy": check_worker_copy,
    "defer_stragglers": stragglers.check_defer_stragglers,
    "straggler_window": stragglers.check_straggler_window,
    "max_batch_cost": by_cost.check_max_batch_cost,
    "sample_cost": by_cost.check_sample_cost,
    "cost_mode": by_cost.check_cost_mode,
    "group_window": by_cost.check_group_window,
    "cost_sync": by_cost.check_cost_sync,
    "stall_report_after": functools.partial(check_stall_after, "stall_report_after"),
}


def check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1), got {value!r}")
