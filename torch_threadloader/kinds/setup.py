"""What an epoch runs on, made by the same two functions in the loader's process and in a worker
process: its resources (:func:`epoch_resources`: the pools and the loop) and its workers
(:func:`epoch_workers`: a dataset copy, ``WorkerInfo``, random state and ``worker_init_fn`` each)."""

from __future__ import annotations

from collections.abc import Callable

from torch_threadloader.fetch import Workers
from torch_threadloader.kinds import strategy_of
from torch_threadloader.plan import LoaderPlan
from torch_threadloader.resources import Resources
from torch_threadloader.userdata import UserObject

__all__ = ["epoch_resources", "epoch_workers"]


def epoch_resources(plan: LoaderPlan, kept: Resources, dataset: UserObject) -> tuple[Resources, bool]:
    """The resources an epoch runs on, and whether the epoch owns them (closes them when it
    ends): the ``kept`` ones with persistent workers, or for a kind whose epoch without workers
    shares them (an async dataset's loop lives on); else new ones of its own."""
    shares = plan.num_workers == 0 and strategy_of(plan.kind).shares_resources_without_workers
    if plan.persistent or shares:
        return kept, False
    return Resources(dataset, kept.intraop_default), True


def epoch_workers(
    plan: LoaderPlan,
    dataset: UserObject,
    worker_init_fn: Callable[[int], None] | None,
    base_seed: int,
    resources: Resources,
    *,
    num_workers: int,
) -> Workers:
    """The epoch's ``num_workers`` workers of ``dataset``. With persistent workers, the ones
    ``resources`` keep when they were made for the same base seed, number and random state (a
    loaded state's base seed, or ``num_workers`` set since, makes new ones, initialised as a new
    loader's would be), kept there for the next epoch; an async dataset's copies have their
    ``aclose()`` awaited when ``resources``' loop closes."""
    with resources.lock:
        old = resources.workers
        if (
            plan.persistent
            and old is not None
            and (old.base_seed, old.num_workers, old.own_rng) == (base_seed, num_workers, plan.own_random_state)
        ):
            return old
        workers = Workers(
            dataset,
            num_workers,
            base_seed,
            worker_init_fn,
            worker_copy=plan.worker_copy,
            own_rng=plan.own_random_state,
            on_copy=strategy_of(plan.kind).on_copy(resources),
        )
        if plan.persistent:
            resources.workers = workers
        return workers
