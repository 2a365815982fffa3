"""A ``datapipes`` graph as the dataset: run once per epoch (it owns its concurrency), ahead of
the caller on one thread (``Prefetcher``) with workers."""

from __future__ import annotations

from typing import cast

import datapipes as dp
from torch_threadloader.fetch import IterableWorkerStream
from torch_threadloader.kinds._shared import Reiterable
from torch_threadloader.kinds.base import KindStrategy
from torch_threadloader.kinds.spec import EpochSpec
from torch_threadloader.plan import Kind, LoaderPlan
from torch_threadloader.resources import WORKER_NAME
from torch_threadloader.resume.node import NodeState
from torch_threadloader.tags import GraphTag
from torch_threadloader.userdata import Batch, Sample, UserObject

__all__ = ["NodeGraph"]


class NodeGraph(NodeState, KindStrategy):
    """The dataset is a node graph: its state is the graph's own."""

    kind = Kind.NODE
    item_concurrency_refusal = (
        "a datapipes graph as the dataset: the graph owns its concurrency (its map's num_threads or max_concurrency)"
    )
    runs_in_processes = False

    def build(self, spec: EpochSpec, pool: dp.ThreadPool | None) -> dp.Node[Batch]:
        graph: dp.Node[Sample] = spec.dataset
        if spec.resume is not None:
            graph.load_state_dict(spec.resume["graph"])

        def graph_state(stream: IterableWorkerStream) -> GraphTag:  # after each batch, taken where it is made
            # A node's state is plain data of its own (generator states as bytes) plus the items it
            # holds (a Shuffler's buffer), kept as they are.
            return cast(dp.NodeIterator[Sample], stream.iterator).state_dict(), stream.exhausted

        def stream() -> IterableWorkerStream:
            made = IterableWorkerStream(
                graph,
                batch_size=spec.plan.batch_size if spec.auto_collation else None,
                drop_last=spec.plan.drop_last,
                collate_fn=spec.collate_fn,
                finish=spec.finish,
                worker=False,
                tag=graph_state,
                stats=spec.stats,
            )
            if spec.graph_opened is not None:  # opened in graph.open(), before iter(loader) returns
                spec.graph_opened(cast(dp.NodeIterator[Sample], made.iterator).state_dict())
            return made

        batches = dp.IterableWrapper(Reiterable(stream), name="threadloader")
        if spec.num_workers == 0:
            return batches
        # A graph owns its concurrency: it runs once per epoch, ahead of the caller on one thread.
        return dp.Prefetcher(
            batches,
            depth=spec.num_workers * spec.prefetch,
            timeout=spec.timeout,
            stall=spec.stall,
            pool=pool,
            name=WORKER_NAME,
        )

    def restore(self, dataset: UserObject, plan: LoaderPlan, local: dp.StateDict) -> None:
        if local.get("finished", True) and local.get("graph"):
            _run_out(dataset, local["graph"])


def _run_out(graph: dp.Node[Sample], state: dp.StateDict) -> None:
    """Resume ``graph`` from the state after its epoch's last item, and run that epoch out
    (nothing is left of it): its generators are then where the uninterrupted run's were."""
    graph.load_state_dict(state)
    with graph.open() as it:
        for _ in it:
            raise RuntimeError(
                f"{graph!r} yielded an item after the state that says its epoch ended: the graph is not "
                "the one the state was taken from"
            )
