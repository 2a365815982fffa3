"""IterableDatasets: one stream per worker (``IterableWrapper`` without workers, a
``ThreadMapper`` over one token per batch with them, a worker's ended stream ending its share);
with ``max_batch_cost`` each worker's stream is cut by cost (``kinds.cost_stream``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.fetch import IterableWorkerStream
from torch_threadloader.fetch.map_fetcher import as_worker
from torch_threadloader.kinds import by_cost
from torch_threadloader.kinds._shared import Reiterable, thread_workers
from torch_threadloader.kinds.base import KindStrategy
from torch_threadloader.kinds.cost_stream import CostStream
from torch_threadloader.kinds.spec import EpochSpec
from torch_threadloader.plan import Kind, LoaderPlan
from torch_threadloader.resume import is_stateful, snapshot
from torch_threadloader.resume.iterable import IterableState
from torch_threadloader.tags import Tagged, WorkerTag
from torch_threadloader.userdata import Batch, UserObject

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["Iterable"]


class Iterable(IterableState, KindStrategy):
    """An ``IterableDataset``: each worker reads its own copy's iterator, in turn."""

    kind = Kind.ITERABLE
    item_concurrency_refusal = (
        "an IterableDataset: its items come from one iterator per worker, read in turn; "
        "use num_workers for more at once"
    )

    def build(self, spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Batch]:
        return by_cost.in_step(spec, self._streams(spec, pool))  # cost_sync=True: ranks in step

    def _streams(self, spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Batch]:
        n = spec.num_workers
        saved: list[dp.StateDict | None] = spec.resume["workers"] if spec.resume is not None else [None] * max(n, 1)
        if n == 0:
            return dp.IterableWrapper(
                Reiterable(lambda: _stream(spec, spec.dataset, False, 0, saved[0])), name="threadloader"
            )
        workers = spec.workers
        assert workers is not None
        # A resumed epoch starts with the worker whose turn was next; thread i is worker i (on a
        # persistent pool, the same thread in every epoch).
        turn = spec.resume["turn"] if spec.resume is not None else 0

        def start(worker_id: int) -> Callable[[object], Batch | Tagged]:
            stream = _stream(spec, workers.start(worker_id), True, worker_id, saved[worker_id])
            return as_worker(stream, workers.rng(worker_id))

        # torch sends each worker a token per batch (its _InfiniteConstantSampler); a worker whose
        # iterator is exhausted ends its share, and the epoch ends when every worker has.
        return thread_workers(spec, pool, dp.IterableWrapper(_Tokens()), start, stop_ends_share=True, first_thread=turn)

    def config(self, inputs: EpochInputs) -> dp.StateDict:
        config = super().config(inputs)
        if inputs.plan.max_batch_cost is not None:  # each worker's stream cut by cost (absent: off)
            config["max_batch_cost"] = inputs.plan.max_batch_cost
            config["cost_mode"] = inputs.plan.cost_mode
            config["group_window"] = inputs.plan.group_window
        return config

    def restore(self, dataset: UserObject, plan: LoaderPlan, local: dp.StateDict) -> None:
        # Without workers the loader's dataset is the one copy: a finished state's own state.
        own = local.get("datasets") if local.get("finished", True) and plan.num_workers == 0 else None
        if own and own[0] is not None and is_stateful(dataset):
            dataset.load_state_dict(own[0])


def _stream(
    spec: EpochSpec, dataset: UserObject, worker: bool, worker_id: int, saved: dp.StateDict | None
) -> IterableWorkerStream:
    if spec.plan.max_batch_cost is not None:
        return _cost_stream(spec, dataset, worker, worker_id, saved)
    return _count_stream(spec, dataset, worker, worker_id, saved)


def _count_stream(
    spec: EpochSpec, dataset: UserObject, worker: bool, worker_id: int, saved: dp.StateDict | None
) -> IterableWorkerStream:
    """Worker ``worker_id``'s batches of an iterable ``dataset``, each as ``((worker_id,
    state, ended), batch)``: ``state`` is the dataset's own ``state_dict()`` after the batch
    when it has one (``None`` otherwise), ``ended`` whether its iterator ended while the batch
    was made. Resumed from ``saved``: a worker that had ended yields nothing; otherwise the
    dataset loads its state, or the items of the batches the worker delivered are read again
    and dropped."""
    batch_size = spec.plan.batch_size if spec.auto_collation else None
    skip = 0
    tag: Callable[[IterableWorkerStream], WorkerTag]
    if saved is not None and saved.get("ended"):
        dataset = ()
    if is_stateful(dataset):
        start = saved.get("state") if saved is not None else None
        if saved is None and spec.start_states is not None and worker_id < len(spec.start_states):
            start = spec.start_states[worker_id]
        if start is not None:
            dataset.load_state_dict(start)

        def tag(stream: IterableWorkerStream) -> WorkerTag:
            return worker_id, snapshot(dataset.state_dict(), dataset), stream.exhausted

    else:
        if saved is not None:
            skip = int(saved["items"]) if "items" in saved else int(saved["batches"]) * (batch_size or 1)

        def tag(stream: IterableWorkerStream) -> WorkerTag:
            # The items read from the epoch's start: the stream counts the ones it reads again
            # and drops (``skip``) too, so they are not added again (a second resume lost them).
            return worker_id, None, stream.exhausted, stream.items_read

    return IterableWorkerStream(
        dataset,
        batch_size=batch_size,
        drop_last=spec.plan.drop_last,
        collate_fn=spec.collate_fn,
        finish=spec.finish,
        worker=worker,
        skip_items=skip,
        tag=tag,
        stats=spec.stats,
        count_items=not is_stateful(dataset),
    )


def _cost_stream(
    spec: EpochSpec, dataset: UserObject, worker: bool, worker_id: int, saved: dp.StateDict | None
) -> CostStream:
    """Worker ``worker_id``'s stream cut by cost (``kinds.cost_stream``), resumed from the
    replay point of the last batch it delivered (``saved``), or from its copy's own state at
    the start (a persistent worker's, or none)."""
    if saved is not None and saved.get("ended"):
        dataset = ()
    point = saved.get("state") if saved is not None and int(saved.get("batches", 0)) else None
    if point is None and is_stateful(dataset):
        start = saved.get("state") if saved is not None else None
        if saved is None and spec.start_states is not None and worker_id < len(spec.start_states):
            start = spec.start_states[worker_id]
        if start is not None:
            dataset.load_state_dict(start)
    # In a worker process its thread worker_id is another of the loader's workers: named so.
    named = spec.workers.info(worker_id).id if worker and spec.workers is not None else worker_id
    return CostStream(
        dataset,
        by_cost.cost_settings(spec),
        worker_id=worker_id,
        named=named,
        saved=point,
        drop_last=spec.plan.drop_last,
        collate_fn=spec.collate_fn,
        finish=spec.finish,
        worker=worker,
        stats=spec.stats,
    )


class _Tokens:
    """An endless stream of ``None``: one per batch asked of the workers."""

    def __iter__(self) -> itertools.repeat[None]:
        return itertools.repeat(None)
