"""The epoch's graph in the loader's process when its work runs in worker processes
(:class:`ProcessGraph`); :func:`~torch_threadloader.processes.node.process_graph` makes it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import datapipes as dp
from torch_threadloader.budget import BudgetTotals
from torch_threadloader.over_budget import OverBudgetRecord
from torch_threadloader.processes.messages import News, StatsDict, TaggedBatch
from torch_threadloader.processes.pool import NAME, WorkerProcesses
from torch_threadloader.skip import ErrorPolicy
from torch_threadloader.stats import LoaderStats
from torch_threadloader.userdata import Batch, Index

__all__ = ["ProcessGraph"]


class ProcessGraph(dp.Node[TaggedBatch]):
    """The epoch's graph in the loader's process when the work runs in worker processes: it
    yields ``(tag, batch)`` as the in-process graph does (``tag`` the batch's position in the
    epoch for map-style and async datasets, ``(worker, state, ended)`` for an
    ``IterableDataset``), from the children of ``pool`` (or of processes it starts for itself,
    when another live epoch holds the pool). ``source`` is the epoch's ``Sampler`` (with
    positions) for a map-style dataset, ``None`` for an ``IterableDataset``; ``epoch`` runs
    each epoch (it is told this graph and the state to resume from); ``over_budget`` takes in
    the children's records of samples over ``max_batch_cost`` (their workers cut by cost)."""

    def __init__(
        self,
        source: dp.Node[tuple[int, Index]] | None,
        pool: WorkerProcesses,
        *,
        base_seed: int,
        resume: dp.StateDict | None,
        timeout: float | None,
        stall: dp.StallWatch | None = None,
        finish: Callable[[Batch], Batch] | None,
        loader_stats: LoaderStats | None = None,
        policy: ErrorPolicy | None = None,
        budget: BudgetTotals | None = None,
        over_budget: Callable[[Sequence[OverBudgetRecord]], None] | None = None,
        epoch: Callable[[ProcessGraph, dp.StateDict | None], dp.NodeIterator[TaggedBatch]],
    ) -> None:
        super().__init__(source, name=NAME)
        self._epoch = epoch  # how an epoch runs: ProcessEpoch (map-style, async) or TurnsEpoch (iterable)
        self.budget = budget  # max_bytes_in_flight: split between the children; their totals
        self.loader_stats = loader_stats  # stats=True: the children's stats are merged into it
        self.policy = policy  # on_error: the children's skip records are added to it
        # max_batch_cost with an IterableDataset: takes in the over-budget records of this epoch
        self.over_budget = over_budget
        self.pool = pool
        self.base_seed = base_seed
        self.resume = resume
        self.timeout = timeout
        self.stall = stall  # stall_report_after: the parent's dispatcher reports what it waits for
        self.finish = finish
        self._children_lock = threading.Lock()
        self._children_stats: list[StatsDict] = [{} for _ in range(pool.count)]

    def stats(self) -> StatsDict:
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

    def child_stats(self, index: int, stats: StatsDict) -> None:
        with self._children_lock:
            self._children_stats[index] = stats

    def _open(self, state: dp.StateDict | None) -> dp.NodeIterator[TaggedBatch]:
        return self._epoch(self, state)
