"""datapipes: composable, bounded, stateful data-loading nodes that run on threads.

Every node is a :class:`torch.utils.data.IterableDataset`; ``iter(node)`` starts one epoch.
See ``docs/architecture.md`` for the threading model and the invariants every node keeps.
"""

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, Deadline
from datapipes.async_fetcher import AsyncFetcher
from datapipes.base import Node, NodeIterator, StateDict, add_item_note, as_node
from datapipes.batcher import Batcher
from datapipes.collator import Collator
from datapipes.cost_batcher import COST_MODES, CostBatcher, CostCut, batch_cost
from datapipes.dispatch import (
    Dispatcher,
    DispatchSettings,
    LoopTransport,
    StallView,
    StallWatch,
    ThreadTransport,
    Transport,
    Where,
)
from datapipes.errors import EpochClosedError, NodeTimeoutError, WorkerLostError
from datapipes.event_loop import EventLoopThread
from datapipes.filter import Filter
from datapipes.header import Header
from datapipes.iterable_wrapper import IterableWrapper
from datapipes.mapper import Mapper, MapperIterator
from datapipes.mux import Mux
from datapipes.prefetcher import Prefetcher, pin_memory
from datapipes.ready_batcher import ReadyBatcher
from datapipes.reorderer import Reorderer
from datapipes.sampler import Sampler
from datapipes.shuffler import Shuffler
from datapipes.stats import NodeStats, StatsCounter
from datapipes.thread_mapper import ThreadMapper
from datapipes.thread_pool import ThreadPool
from datapipes.unbatcher import Unbatcher

__all__ = [
    "AsyncFetcher",
    "Batcher",
    "COST_MODES",
    "Collator",
    "CostBatcher",
    "CostCut",
    "DEFAULT_JOIN_TIMEOUT",
    "Deadline",
    "DispatchSettings",
    "Dispatcher",
    "EpochClosedError",
    "EventLoopThread",
    "Filter",
    "Header",
    "IterableWrapper",
    "LoopTransport",
    "Mapper",
    "MapperIterator",
    "Mux",
    "Node",
    "NodeIterator",
    "NodeStats",
    "NodeTimeoutError",
    "Prefetcher",
    "ReadyBatcher",
    "Reorderer",
    "Sampler",
    "Shuffler",
    "StallView",
    "StallWatch",
    "StateDict",
    "StatsCounter",
    "ThreadMapper",
    "ThreadPool",
    "ThreadTransport",
    "Transport",
    "Unbatcher",
    "Where",
    "WorkerLostError",
    "add_item_note",
    "as_node",
    "batch_cost",
    "pin_memory",
]
