"""``SyncDataset``: an async map-style dataset for synchronous callers (torch's DataLoader)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from torch.utils.data import Dataset

import datapipes as dp
from torch_threadloader.fetch import gather_window

__all__ = ["SyncDataset"]

T = TypeVar("T")


#: Every loop holder of this process, so a forked child can give each a fresh lock.
_holders: weakref.WeakSet[_LoopHolder] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """New locks in a forked child: a parent's thread may have held one at the fork."""
    for holder in list(_holders):
        holder.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _LoopHolder:
    """The private event-loop thread of a SyncDataset and its copies, one per process, made
    on first use. In a forked child the parent's loop (and the connections on it) stays
    referenced and is never touched: closing its sockets there would unregister them from
    the epoll instance the parent shares. Thread-safe; fork-safe."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.lock = threading.Lock()
        self.loop: dp.EventLoopThread | None = None
        self.pid = os.getpid()
        self.stale: list[dp.EventLoopThread] = []  # a parent's loop after a fork: never touched
        _holders.add(self)

    def _forget_parent(self) -> None:
        """In a forked child, set the parent's loop aside (call holding the lock)."""
        if self.pid != os.getpid():  # the parent's loop thread is not here
            if self.loop is not None:
                self.stale.append(self.loop)
            self.loop, self.pid = None, os.getpid()

    def get(self) -> dp.EventLoopThread:
        with self.lock:
            self._forget_parent()
            if self.loop is None or self.loop.closed:
                self.loop = dp.EventLoopThread("threadloader-remote-sync")
                aclose = getattr(self.dataset, "aclose", None)
                if aclose is not None:
                    self.loop.add_closer(aclose)
            return self.loop

    def close(self, timeout: float | None) -> None:
        with self.lock:
            self._forget_parent()
            loop, self.loop = self.loop, None
        if loop is not None:
            loop.close(timeout)


class SyncDataset(Dataset[T], Generic[T]):
    """``dataset[i]`` and ``dataset.__getitems__(indices)`` as plain calls, for an async
    map-style ``dataset`` (``async def __getitem__``): they run on a private event-loop
    thread (``threadloader-remote-sync``), made at the first call in each process (torch's
    worker processes each make their own after the fork) and shared by copies and threads.

    ``__getitems__`` (which torch's DataLoader calls for each batch) awaits the batch's items
    with at most ``concurrency`` in flight, returning them in order; the first error cancels
    the rest and is raised. :meth:`close` (or ``with``, or garbage collection, or interpreter
    exit) awaits ``dataset.aclose()`` on that loop and stops its thread within ``timeout``.
    Pickling (spawned workers) carries the dataset, not the loop."""

    def __init__(self, dataset: Any, concurrency: int = 64) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if not callable(getattr(dataset, "__getitem__", None)):
            raise TypeError(f"dataset must be an async map-style dataset, got {type(dataset).__name__}")
        self.dataset = dataset
        self.concurrency = concurrency
        self._holder = _LoopHolder(dataset)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> T:
        return self._holder.get().run(self._one(index))

    def __getitems__(self, indices: Sequence[int]) -> list[T]:
        return self._holder.get().run(self._many(list(indices)))

    async def _one(self, index: int) -> T:
        result: T = await self.dataset[index]
        return result

    async def _many(self, indices: list[int]) -> list[T]:
        # What ThreadLoader does for a batch of an async dataset: at most `concurrency` at
        # once, the first failure in index order raised as itself, the others cancelled.
        return await gather_window(indices, self.dataset, self.concurrency)

    def close(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT) -> None:
        """Await the dataset's ``aclose()`` and stop the loop thread; idempotent. A later
        call starts a new loop."""
        self._holder.close(timeout)

    def __enter__(self) -> SyncDataset[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __copy__(self) -> SyncDataset[T]:
        copy = SyncDataset.__new__(SyncDataset)
        copy.__dict__.update(self.__dict__)  # shares the loop holder: one loop per process
        return copy

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "concurrency": self.concurrency}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dataset"], state["concurrency"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SyncDataset({self.dataset!r}, concurrency={self.concurrency})"
