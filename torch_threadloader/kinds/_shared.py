"""What the kinds' graphs share: the epoch's worker threads (a ``ThreadMapper``), a Sampler
set to resume, and a re-iterable made per ``iter()``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import datapipes as dp
from torch_threadloader.intraop import use_one_intraop_thread
from torch_threadloader.kinds.spec import EpochSpec
from torch_threadloader.resources import WORKER_NAME
from torch_threadloader.resume import sampler_resume

__all__ = ["Reiterable", "resumed", "thread_workers"]

_In = TypeVar("_In")
_Out = TypeVar("_Out")


def thread_workers(
    spec: EpochSpec,
    pool: dp.ThreadPool | None,
    source: dp.Node[_In],
    start: Callable[[int], Callable[[_In], _Out]],
    *,
    stop_ends_share: bool = False,
    worker_of: Callable[[_In], int] | None = None,
    first_thread: int = 0,
    feed_on_consumer: bool = False,
    thread_per_batch: bool = False,
) -> dp.Node[_Out]:
    """The epoch's ``num_workers`` workers: ``start(i)`` on worker ``i``'s thread gives its
    function; ``feed_on_consumer``: ``source`` is pulled in ``next()`` (see ``ThreadMapper``).
    ``thread_per_batch``: ``num_workers * prefetch_factor`` threads instead, one per batch
    loading or ready (items as the unit of concurrency: a batch's thread mostly waits)."""
    n = spec.num_workers
    threads = n * spec.prefetch if thread_per_batch else n
    return dp.ThreadMapper(
        source,
        worker_fn=_on_worker_thread(start, spec, pool),
        stop_ends_share=stop_ends_share,
        worker_of=worker_of,
        first_thread=first_thread,
        num_threads=threads,
        max_pending=n * spec.prefetch - threads,
        in_order=spec.plan.in_order,
        timeout=spec.timeout,
        stall=spec.stall,
        pool=pool,
        name=WORKER_NAME,
        feed_on_consumer=feed_on_consumer,
    )


def _on_worker_thread(
    start: Callable[[int], Callable[[_In], _Out]], spec: EpochSpec, pool: dp.ThreadPool | None
) -> Callable[[int], Callable[[_In], _Out]]:
    """A worker's start: its own threads (not a kept pool's) get one intra-op thread first."""
    if pool is not None:
        return start
    default = spec.resources.intraop_default

    def start_here(worker_id: int) -> Callable[[_In], _Out]:
        use_one_intraop_thread(default)
        return start(worker_id)

    return start_here


def resumed(graph: dp.Node[_Out], spec: EpochSpec, depth: int) -> dp.Node[_Out]:
    """``graph`` set to resume its Sampler (``depth`` sources down) where ``spec.resume`` says."""
    resume = spec.resume
    if resume is not None:
        state: dp.StateDict = sampler_resume(resume)
        for _ in range(depth):
            state = {"source": state}
        graph.load_state_dict(state)
    return graph


class Reiterable(Generic[_Out]):
    """Calls ``make()`` for each ``iter()``."""

    def __init__(self, make: Callable[[], Iterator[_Out]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[_Out]:
        return self._make()
