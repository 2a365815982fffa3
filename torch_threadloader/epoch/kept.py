"""What a loader keeps across epochs (:class:`Kept`): the resources of persistent workers and of
an async dataset's loop, the base seed, the worker processes and the open epochs' runs."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import datapipes as dp
from torch_threadloader.graph import Resources

if TYPE_CHECKING:
    from torch_threadloader.epoch.epoch import EpochRun

__all__ = ["Kept"]


class Kept:
    """What a loader keeps across epochs: with persistent workers their pool, workers and base
    seed; an event loop for async datasets without workers; the open epochs' runs. Holds no
    reference to the loader, so the loader's finalizer can close it.

    ``epochs`` is a plain set, read and changed only under ``lock``: an epoch's run is added
    when it opens and removed when it closes (by its epoch, its finalizer or :meth:`close`), so
    no entry goes away behind the lock (a ``WeakSet`` loses entries to the collector on any
    thread, and copying it while it changes fails without the GIL)."""

    def __init__(self, dataset: Any, intraop_default: int) -> None:
        self.resources = Resources(dataset, intraop_default)
        self.lock = threading.Lock()
        self.epochs: set[EpochRun] = set()
        self.base_seed: int | None = None
        self.pin_warned = False
        self.processes: Any = None  # worker_processes > 0: the loader's WorkerProcesses, made at the first iter()

    def after_fork(self) -> None:
        """In a forked child: forget the parent's threads and epochs (they are not here)."""
        if self.resources.pid != os.getpid():
            self.resources.forget_after_fork()
            with self.lock:
                self.epochs.clear()

    def add(self, run: EpochRun) -> None:
        """``run`` opens its graph now (see ``EpochRun.opened``)."""
        with self.lock:
            self.epochs.add(run)
            run.opening = True

    def close(self, timeout: float | None, *, interrupted: bool = False) -> None:
        """Close the open epochs, then the kept threads and processes, within ``timeout`` in all."""
        with self.lock:
            epochs = list(self.epochs)
            self.epochs.clear()
            self.base_seed = None
        deadline = dp.Deadline(timeout)
        for epoch in epochs:  # first stop the work that runs on the kept threads
            epoch.close(deadline.remaining(), warn=not interrupted)
        self.resources.close(deadline.remaining(), warn=not interrupted)
        self.resources.workers = None
        with self.lock:
            processes, self.processes = self.processes, None
        if processes is not None:
            processes.close(deadline.remaining(), warn=not interrupted)
