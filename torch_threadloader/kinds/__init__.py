"""One strategy per dataset kind (map-style, iterable, async, node graph), chosen once from the
plan's :class:`~torch_threadloader.plan.Kind`: how the epoch's graph is built, what the kind
allows, what the loader's state holds of its dataset.

==================  ===============================  ==========================================
dataset             ``num_workers=0``                ``num_workers=N``
==================  ===============================  ==========================================
map-style           ``Mapper(Sampler, fetch)``       ``ThreadMapper(Sampler, worker_fn, N)``
IterableDataset     ``IterableWrapper(stream)``      ``ThreadMapper(tokens, worker_fn, N)``
async map-style     ``AsyncFetcher → Mapper``        the same, ``max_concurrency=N``
``datapipes`` node  the node                         ``Prefetcher(node, depth=N*prefetch)``
==================  ===============================  ==========================================
"""

from __future__ import annotations

import datapipes as dp
from torch_threadloader.kinds.asynchronous import Async
from torch_threadloader.kinds.base import KindStrategy
from torch_threadloader.kinds.iterable import Iterable
from torch_threadloader.kinds.map_style import MapStyle
from torch_threadloader.kinds.node import NodeGraph
from torch_threadloader.kinds.spec import EpochSpec, TimedIndices
from torch_threadloader.plan import Kind
from torch_threadloader.userdata import Batch

__all__ = ["STRATEGIES", "EpochSpec", "KindStrategy", "TimedIndices", "build_graph", "strategy_of"]

#: The strategy of each kind (they hold no state: one instance each).
STRATEGIES: dict[Kind, KindStrategy] = {
    Kind.MAP: MapStyle(),
    Kind.ITERABLE: Iterable(),
    Kind.ASYNC: Async(),
    Kind.NODE: NodeGraph(),
}


def strategy_of(kind: Kind | str) -> KindStrategy:
    """The strategy of ``kind`` (a :class:`Kind` or its value)."""
    return STRATEGIES[Kind(kind)]


def build_graph(spec: EpochSpec, kind: Kind | str, pool: dp.ThreadPool | None) -> dp.Node[Batch]:
    """The graph of one epoch for a dataset of ``kind`` (``pool``: persistent workers' kept pool)."""
    return strategy_of(kind).build(spec, pool)
