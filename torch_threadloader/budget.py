"""A byte budget for what a loader holds: ``ThreadLoader(..., max_bytes_in_flight=N)``.

Worker threads charge each item they fetch (its size in bytes, :func:`nbytes`) to the budget
before fetching the next, and wait while the budget is spent: the batch the caller will take
next is always admitted, so the budget can be passed by at most that one batch and nothing
waits for ever. A batch's charge is given back when the caller takes it (from then on the
batch is the training loop's, not the loader's). Closing the budget wakes every waiter.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = [
    "BudgetTotals",
    "ByteBudget",
    "nbytes",
]


def nbytes(obj: Any) -> int:
    """The bytes of a sample or batch: tensors', arrays', bytes-likes' data, summed through
    lists, tuples and dicts; ``sys.getsizeof`` for anything else."""
    if isinstance(obj, torch.Tensor):
        return int(obj.nelement() * obj.element_size())
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, bytes | bytearray | memoryview):
        return len(obj)
    if isinstance(obj, list | tuple):
        return sum(nbytes(o) for o in obj)
    if isinstance(obj, Mapping):
        return sum(nbytes(v) for v in obj.values())
    return sys.getsizeof(obj)


class ByteBudget:
    """At most ``limit`` bytes charged at once, but for the batch the caller needs next."""

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ValueError(f"max_bytes_in_flight must be a positive int (bytes), got {limit!r}")
        self.limit = limit
        self._cond = threading.Condition(threading.Lock())
        self.used = 0
        self.peak = 0
        self.waits = 0  # times a worker waited for room
        self._next: int | None = None  # the position of the batch the caller takes next
        self._charges: dict[int, int] = {}  # position -> bytes charged to its batch
        self._closed = False

    def charge(self, position: int, size: int) -> None:
        """Charge ``size`` bytes to the batch at ``position``, waiting for room first."""
        with self._cond:
            waited = False
            while not self._closed and self.used > 0 and self.used + size > self.limit and position != self._next:
                waited = True
                self._cond.wait()
            self.waits += waited
            self.used += size
            self._charges[position] = self._charges.get(position, 0) + size
            if self.used > self.peak:
                self.peak = self.used

    def taken(self, position: int, next_position: int | None) -> None:
        """The caller took the batch at ``position`` and needs ``next_position`` next."""
        with self._cond:
            self.used -= self._charges.pop(position, 0)
            self._next = next_position
            self._cond.notify_all()

    def needs(self, position: int | None) -> None:
        with self._cond:
            self._next = position
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter; from now on nothing waits."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def report(self) -> tuple[int, int]:
        """``(peak, waits)`` so far."""
        with self._cond:
            return self.peak, self.waits

    def reopen(self) -> None:
        """A new epoch: nothing charged, nothing closed."""
        with self._cond:
            self._closed = False
            self.used = 0
            self._charges.clear()
            self._next = None
            self._cond.notify_all()


class BudgetTotals:
    """What ``stats()["budget"]`` shows for an epoch whose budget is split between worker
    processes (``limit // P`` each): the whole ``limit``, the sum of the processes' peaks (an
    upper bound on the bytes held at once) and of their waits. Thread-safe."""

    def __init__(self, limit: int, processes: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._peaks = [0] * processes
        self._waits = [0] * processes

    def update(self, process: int, peak: int, waits: int) -> None:
        with self._lock:
            self._peaks[process] = max(self._peaks[process], peak)
            self._waits[process] = max(self._waits[process], waits)

    @property
    def peak(self) -> int:
        with self._lock:
            return sum(self._peaks)

    @property
    def waits(self) -> int:
        with self._lock:
            return sum(self._waits)
