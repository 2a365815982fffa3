"""SharedItems: items, not batches, as the unit of concurrency of a map-style epoch on worker
threads with ``item_concurrency > 1``. ``num_workers * prefetch_factor`` batch threads (thread
``t`` loads as worker ``t % num_workers`` in order) start their batches' items on the item pool,
each item holding one of ``num_workers * item_concurrency`` :class:`ThreadItemSlots`, and each
worker's batches are collated one after another in the epoch's order (as torch's worker
collates), so a ``collate_fn`` drawing from the worker's random state draws as it would there."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import datapipes as dp
from torch_threadloader.fetch.thread_slots import ThreadItemSlots
from torch_threadloader.skip import current_position

__all__ = ["SharedItems"]

_T = TypeVar("_T")
_R = TypeVar("_R")


class SharedItems:
    """The shared part of one epoch: its item slots, the batches registered in the epoch's
    order (:meth:`source` registers each as the dispatcher pulls it), and each worker's collate
    turns. Batch ``k`` of worker ``w`` (``worker_of(position) % num_workers``, as torch gives
    batch ``p`` to worker ``p % num_workers``) runs on thread ``w + num_workers * (k %
    prefetch)``. :meth:`close` (the source closing: the epoch stops) wakes every waiting batch.
    Any thread; all state under one lock."""

    def __init__(
        self,
        *,
        num_workers: int,
        item_concurrency: int,
        prefetch: int,
        items_pool: Callable[[], dp.ThreadPool],
        worker_of: Callable[[int], int] | None = None,
    ) -> None:
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.num_threads = num_workers * prefetch
        self.slots = ThreadItemSlots(num_workers * item_concurrency)
        self._items_pool = items_pool
        self._worker_of = worker_of
        self._lock = threading.Lock()
        self._turn = [threading.Condition(self._lock) for _ in range(num_workers)]
        self._queued: list[deque[int]] = [deque() for _ in range(num_workers)]  # positions not yet collated
        self._started = [0] * num_workers  # batches registered per worker
        self._placed: dict[int, tuple[int, int]] = {}  # position -> (worker, thread), until done
        self._closed = False

    # -- the epoch's order ----------------------------------------------------------------------
    def source(self, sampler: dp.Node[tuple[int, Any]]) -> dp.Node[tuple[int, Any]]:
        """``sampler``'s ``(position, indices)``, each batch registered as it is pulled."""
        return _Registering(sampler, self)

    def worker_at(self, position: int) -> int:
        """The worker the batch at ``position`` belongs to (torch's batch ``p`` -> worker ``p % N``)."""
        return (position if self._worker_of is None else self._worker_of(position)) % self.num_workers

    def register(self, position: int) -> None:
        """The batch at ``position`` is the next of the epoch (called in the epoch's order)."""
        worker = self.worker_at(position)
        with self._lock:
            k = self._started[worker]
            self._started[worker] = k + 1
            self._placed[position] = (worker, worker + self.num_workers * (k % self.prefetch))
            self._queued[worker].append(position)

    def thread_of(self, position: int) -> int:
        """The batch thread the batch at ``position`` goes to (``in_order=True``)."""
        with self._lock:
            return self._placed[position][1]

    def worker_of(self, position: int) -> int:
        """The worker the batch at ``position`` is loaded by."""
        with self._lock:
            return self._placed[position][0]

    # -- one batch ------------------------------------------------------------------------------
    def load_items(self, fn: Callable[[_T], _R], keys: Sequence[_T]) -> list[_R]:
        """``[fn(k) for k in keys]`` in key order for the batch at this thread's position
        (:func:`~torch_threadloader.skip.set_position`), each call on the item pool holding a
        slot taken in the epoch's order; once one has failed none is started, and the first
        error in key order is raised. Returns once every call ended and it is the batch's turn
        to be collated; raises :class:`~datapipes.EpochClosedError` when the epoch closes first."""
        position = current_position()
        assert position is not None, "load_items runs in a batch's call (set_position)"
        ended: queue.SimpleQueue[Future[_R]] = queue.SimpleQueue()  # each call, as it ends
        failed = threading.Event()
        started: list[Future[_R]] = []
        try:
            for n, key in enumerate(keys):
                if not self.slots.acquire((position, n)):
                    raise dp.EpochClosedError("the epoch closed while its batches loaded")
                if failed.is_set():
                    self.slots.release()
                    break
                started.append(self._start(fn, key, ended, failed))
            for _ in started:
                ended.get()  # (not Future.result(): a stall report reads this thread as running)
            values = [future.result() for future in started]
        finally:
            for future in started:
                future.cancel()
        self._wait_turn(position)
        return values

    def _start(
        self, fn: Callable[[_T], _R], key: _T, ended: queue.SimpleQueue[Future[_R]], failed: threading.Event
    ) -> Future[_R]:
        """``fn(key)`` on the item pool, its slot given back as it ends (or if it never starts)."""
        try:
            future = self._items_pool().submit(fn, key)
        except BaseException:
            self.slots.release()
            raise
        future.add_done_callback(lambda done: self._ended(done, ended, failed))
        return future

    def _ended(self, future: Future[_R], ended: queue.SimpleQueue[Future[_R]], failed: threading.Event) -> None:
        self.slots.release()
        if future.cancelled() or future.exception() is not None:
            failed.set()
        ended.put(future)

    def _wait_turn(self, position: int) -> None:
        """Until the batches its worker registered before this one are collated (or failed)."""
        with self._lock:
            worker = self._placed[position][0]
            queued, turn = self._queued[worker], self._turn[worker]
            while queued and queued[0] != position and not self._closed:
                turn.wait()
            if self._closed:
                raise dp.EpochClosedError("the epoch closed while its batches loaded")

    def done(self, position: int) -> None:
        """The batch at ``position`` is collated, or failed: its worker's next batch may go."""
        with self._lock:
            placed = self._placed.pop(position, None)
            if placed is None:
                return
            queued = self._queued[placed[0]]
            head = bool(queued) and queued[0] == position
            queued.remove(position)
            if head:
                self._turn[placed[0]].notify_all()

    def close(self) -> None:
        """The epoch stops: every batch waiting for a slot or its turn raises. Idempotent."""
        self.slots.close()
        with self._lock:
            self._closed = True
            for turn in self._turn:
                turn.notify_all()


class _Registering(dp.Node[tuple[int, Any]]):
    """A Sampler's ``(position, indices)`` with each batch registered as it is pulled; closing
    its iterator (the dispatcher closes its source first when it stops) closes the items."""

    def __init__(self, source: dp.Node[tuple[int, Any]], shared: SharedItems) -> None:
        super().__init__(source, name="threadloader-batches")
        self.shared = shared

    def _open(self, state: dp.StateDict | None) -> dp.NodeIterator[tuple[int, Any]]:
        return _RegisteringIterator(self._open_source(state), self.shared)


class _RegisteringIterator(dp.NodeIterator[tuple[int, Any]]):
    def __init__(self, source: dp.NodeIterator[tuple[int, Any]], shared: SharedItems) -> None:
        self._source = source
        self._shared = shared

    def __next__(self) -> tuple[int, Any]:
        item = next(self._source)
        self._shared.register(item[0])
        return item

    def state_dict(self) -> dp.StateDict:
        return {"source": self._source.state_dict()}

    def close(self) -> None:
        self._shared.close()
        self._source.close()

    def shutdown(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        self._shared.close()
        return self._source.shutdown(timeout, warn=warn)
