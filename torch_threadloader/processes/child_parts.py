"""The parts of one epoch in a worker process: its inbox as the graph's sampler or credits,
and its share of the loader's workers."""

from __future__ import annotations

import queue

from torch.utils.data._utils.worker import WorkerInfo

from torch_threadloader.fetch import Workers
from torch_threadloader.processes.messages import (
    Cancel,
    Credit,
    Exit,
    LoadBatch,
    NoMoreBatches,
    StartEpoch,
    ToChild,
)
from torch_threadloader.random_state import ItemStreams, WorkerRNG
from torch_threadloader.userdata import Index, UserObject

__all__ = ["EpochInbox", "ShareOfWorkers"]


class ShareOfWorkers:
    """Child ``c``'s view of the loader's ``P * n`` workers: its thread ``t`` is worker
    ``t * P + c`` (so batch ``i`` is loaded by worker ``i % (P * n)``, as in one process
    with ``P * n`` worker threads)."""

    def __init__(self, workers: Workers, child: int, count: int, local: int) -> None:
        self._workers = workers
        self._child = child
        self._count = count
        self.num_workers = local

    def start(self, worker_id: int) -> UserObject:
        """Start the calling thread as this child's thread ``worker_id``; its dataset copy."""
        return self._workers.start(worker_id * self._count + self._child)

    def info(self, worker_id: int) -> WorkerInfo:
        info: WorkerInfo = self._workers.info(worker_id * self._count + self._child)
        return info

    def rng(self, worker_id: int) -> WorkerRNG | None:
        return self._workers.rng(worker_id * self._count + self._child)

    def epoch_streams(self) -> ItemStreams | None:
        return self._workers.epoch_streams()


class EpochInbox:
    """The items the parent sends for one epoch, in order, as the graph's sampler (map-style)
    or as credits (``IterableDataset``). Ends at the epoch's :class:`NoMoreBatches` or
    :class:`Cancel`; a later epoch's :class:`StartEpoch` or :class:`Exit` ends it too and is
    left in ``held`` for the main loop. Read by one thread at a time: the graph's sampler, or
    the main thread taking credits."""

    def __init__(self, messages: queue.SimpleQueue[ToChild], epoch: int) -> None:
        self._messages = messages
        self._epoch = epoch
        self._ended = False
        self._count = 0  # items handed to the graph: the graph's position of the next one
        self._slots: dict[int, int] = {}  # position -> the slot the parent named for it
        self.held: StartEpoch | Exit | None = None

    def __iter__(self) -> EpochInbox:
        return self

    def __next__(self) -> Index:
        message = self._next()
        if not isinstance(message, LoadBatch):
            raise StopIteration
        if message.slot is not None:
            self._slots[self._count] = message.slot
        self._count += 1
        return message.indices

    def worker_of(self, position: int) -> int:
        """The graph's ``worker_of``: the batch at this process's ``position`` is loaded by its
        thread ``slot % n``, the slot the parent named (``p // P`` for the epoch's position
        ``p``), else ``position % n``. Asked once per batch."""
        return self._slots.pop(position, position)

    def credit(self) -> bool:
        return self._next() is not None

    def _next(self) -> LoadBatch | Credit | None:
        if self._ended:
            return None
        while True:
            message = self._messages.get()
            if isinstance(message, Exit) or (isinstance(message, StartEpoch) and message.epoch > self._epoch):
                self.held = message
                break
            if isinstance(message, Exit) or message.epoch != self._epoch:
                continue  # an earlier epoch's
            if isinstance(message, LoadBatch | Credit):
                return message
            if isinstance(message, NoMoreBatches | Cancel):
                break
        self._ended = True
        return None
