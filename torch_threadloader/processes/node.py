""":func:`process_graph`, which the loader's epoch calls to make its graph when its work runs in
worker processes: a :class:`~torch_threadloader.processes.graph.ProcessGraph` of the loader's
processes, whose epochs run as :class:`ProcessEpoch` (map-style, async) or :class:`TurnsEpoch`
(an IterableDataset)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.budget import BudgetTotals
from torch_threadloader.kinds import strategy_of
from torch_threadloader.kinds.by_cost import SampleBatches, over_budget_taker
from torch_threadloader.processes.epoch import ProcessEpoch
from torch_threadloader.processes.graph import ProcessGraph
from torch_threadloader.processes.inputs import ChildInputs
from torch_threadloader.processes.pool import WorkerProcesses
from torch_threadloader.processes.turns import TurnsEpoch
from torch_threadloader.resume import sampler_resume

if TYPE_CHECKING:
    from torch_threadloader.kinds.spec import EpochSpec

__all__ = ["process_graph"]


def process_graph(spec: EpochSpec, kind: str, base_seed: int, *, totals: BudgetTotals | None = None) -> ProcessGraph:
    """The epoch's graph for a loader with ``worker_processes > 0`` (``spec``: its
    ``EpochSpec``): the loader's processes (started at its first ``iter()``, sent the
    loader's plan) fed from the epoch's sampler, resumed where ``spec.resume`` says; the
    children's byte budget reports go to ``totals``, the epoch's own."""
    parent = spec.inputs
    assert parent is not None and parent.mp_context is not None, "worker processes are started by the parent"
    plan, kept, context = parent.plan, parent.kept, parent.mp_context
    inputs = ChildInputs.of(parent)
    with kept.lock:
        pool = old = kept.processes
        if pool is None or pool.pid != os.getpid():  # none yet, or the parent's, in a forked child
            pool = old = kept.processes = WorkerProcesses(inputs, plan.worker_processes, context)
        elif not pool.inputs.same_start(inputs):  # a setting changed since they started: new ones
            pool = kept.processes = WorkerProcesses(inputs, plan.worker_processes, context)
    if old is not pool:
        old.retire()  # stopped now, or when the epoch that holds them ends
    resume = spec.resume
    iterable = not strategy_of(kind).uses_sampler  # its workers read their own streams
    # max_batch_cost: each child "batch" is one sample of the epoch's order, cut by cost here
    # (an IterableDataset's: each worker's stream is cut in its child, the records taken in here)
    by_cost = plan.max_batch_cost is not None and not iterable
    indices = SampleBatches(spec.indices) if by_cost and spec.indices is not None else spec.indices
    source = None if iterable else dp.Sampler(sampler=indices, positions=True)
    graph = ProcessGraph(
        source,
        pool,
        base_seed=base_seed,
        resume=resume if iterable else None,
        timeout=plan.timeout or None,
        stall=spec.stall,
        finish=None if by_cost else spec.finish,  # by cost: pinned once the batch is cut
        loader_stats=parent.state.stats,
        policy=spec.policy if plan.skips else None,
        budget=totals,
        over_budget=over_budget_taker(spec) if iterable and plan.max_batch_cost is not None else None,
        epoch=TurnsEpoch if iterable else ProcessEpoch,
    )
    if source is not None and resume is not None:  # the sampler passes over the delivered positions
        graph.load_state_dict({"source": sampler_resume(resume)})
    return graph
