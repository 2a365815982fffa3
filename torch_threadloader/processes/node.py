"""The epoch's graph in the loader's process when its work runs in worker processes
(:class:`ProcessGraph`), and :func:`process_graph`, which the loader's epoch calls to make it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import datapipes as dp
from torch_threadloader.budget import BudgetTotals
from torch_threadloader.kinds import strategy_of
from torch_threadloader.processes.epoch import ProcessEpoch
from torch_threadloader.processes.inputs import ChildInputs
from torch_threadloader.processes.messages import News
from torch_threadloader.processes.pool import NAME, WorkerProcesses
from torch_threadloader.processes.turns import TurnsEpoch
from torch_threadloader.resume import sampler_resume
from torch_threadloader.skip import ErrorPolicy
from torch_threadloader.stats import LoaderStats

__all__ = ["ProcessGraph", "process_graph"]


class ProcessGraph(dp.Node[Any]):
    """The epoch's graph in the loader's process when the work runs in worker processes: it
    yields ``(tag, batch)`` as the in-process graph does (``tag`` the batch's position in the
    epoch for map-style and async datasets, ``(worker, state, ended)`` for an
    ``IterableDataset``), from the children of ``pool`` (or of processes it starts for itself,
    when another live epoch holds the pool). ``source`` is the epoch's ``Sampler`` (with
    positions) for a map-style dataset, ``None`` for an ``IterableDataset``."""

    def __init__(
        self,
        source: dp.Node[Any] | None,
        pool: WorkerProcesses,
        *,
        base_seed: int,
        resume: dict[str, Any] | None,
        timeout: float | None,
        finish: Callable[[Any], Any] | None,
        loader_stats: LoaderStats | None = None,
        policy: ErrorPolicy | None = None,
        budget: BudgetTotals | None = None,
    ) -> None:
        super().__init__(source, name=NAME)
        self.budget = budget  # max_bytes_in_flight: split between the children; their totals
        self.loader_stats = loader_stats  # stats=True: the children's stats are merged into it
        self.policy = policy  # on_error: the children's skip records are added to it
        self.pool = pool
        self.base_seed = base_seed
        self.resume = resume
        self.timeout = timeout
        self.finish = finish
        self._children_lock = threading.Lock()
        self._children_stats: list[dict[str, Any]] = [{} for _ in range(pool.count)]

    def stats(self) -> dict[str, Any]:
        """This node's counters, its sampler's under ``"source"``, and under ``"processes"``
        each worker process's graph ``stats()`` for the epoch (``{}`` until its share ended)."""
        out = super().stats()
        with self._children_lock:
            out["processes"] = [dict(s) for s in self._children_stats]
        return out

    def merge_news(self, c: int, news: News, current: bool) -> ErrorPolicy | None:
        """Child ``c``'s news: its stats merged into the loader's (an earlier epoch's too: the
        work was done), its byte budget's report (this epoch's); the policy its skip records of
        this epoch go to, or None."""
        if news.budget is not None and self.budget is not None and current:
            self.budget.update(c, *news.budget)
        if news.stats is not None and self.loader_stats is not None:
            self.loader_stats.merge(news.stats)
        return self.policy if current and news.errors else None

    def child_stats(self, index: int, stats: dict[str, Any]) -> None:
        with self._children_lock:
            self._children_stats[index] = stats

    def _open(self, state: dp.StateDict | None) -> dp.NodeIterator[Any]:
        if self.source is None:  # an IterableDataset: credits and turns
            return TurnsEpoch(self, state)
        return ProcessEpoch(self, state)


def process_graph(spec: Any, kind: str, base_seed: int, *, totals: BudgetTotals | None = None) -> dp.Node[Any]:
    """The epoch's graph for a loader with ``worker_processes > 0`` (``spec``: its
    ``graph.EpochSpec``): the loader's processes (started at its first ``iter()``, sent the
    loader's plan) fed from the epoch's sampler, resumed where ``spec.resume`` says; the
    children's byte budget reports go to ``totals``, the epoch's own."""
    loader = spec.loader
    plan = loader._plan
    kept = loader._kept
    inputs = ChildInputs.of(loader)
    with kept.lock:
        pool = old = kept.processes
        if pool is None or pool.pid != os.getpid():  # none yet, or the parent's, in a forked child
            pool = old = kept.processes = WorkerProcesses(inputs, plan.worker_processes, loader._mp_context)
        elif not pool.inputs.same_start(inputs):  # a setting changed since they started: new ones
            pool = kept.processes = WorkerProcesses(inputs, plan.worker_processes, loader._mp_context)
    if old is not pool:
        old.retire()  # stopped now, or when the epoch that holds them ends
    resume = spec.resume
    iterable = not strategy_of(kind).uses_sampler  # its workers read their own streams
    source = None if iterable else dp.Sampler(sampler=spec.indices, positions=True)
    graph = ProcessGraph(
        source,
        pool,
        base_seed=base_seed,
        resume=resume if iterable else None,
        timeout=plan.timeout or None,
        finish=spec.finish,
        loader_stats=loader._stats,
        policy=spec.policy if plan.skips else None,
        budget=totals,
    )
    if source is not None and resume is not None:  # the sampler passes over the delivered positions
        graph.load_state_dict({"source": sampler_resume(resume)})
    return graph
