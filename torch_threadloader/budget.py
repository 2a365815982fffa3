"""A byte budget for what a loader holds: ``ThreadLoader(..., max_bytes_in_flight=N)``.

A worker thread asks for room before it fetches an item (:meth:`ByteBudget.admit`): it is let
through while the bytes charged and reserved leave room for one more item of the size
expected, the largest seen so far (the whole budget before any was seen), and that much is
reserved; once fetched, the item's own size (:func:`nbytes`) replaces the reservation
(:meth:`ByteBudget.charge`). So the bytes fetched and not yet taken stay within the budget,
but for the batch the caller will take next, which is always admitted (nothing waits for
ever), and for an item larger than any before it. A batch's charge is given back when the
caller takes it (from then on the batch is the training loop's, not the loader's). Closing
the budget wakes every waiter.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping

import numpy as np
import torch

__all__ = [
    "BudgetTotals",
    "ByteBudget",
    "nbytes",
]


def nbytes(obj: object) -> int:
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
    """At most ``limit`` bytes charged or reserved at once, but for the batch the caller
    needs next (and an item larger than the largest before it)."""

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ValueError(f"max_bytes_in_flight must be a positive int (bytes), got {limit!r}")
        self.limit = limit
        self._cond = threading.Condition(threading.Lock())
        self.used = 0  # bytes charged: fetched and not yet taken
        self.reserved = 0  # bytes reserved by admitted items still fetching
        self.expected: int | None = None  # the largest item seen so far: what an item reserves
        self.peak = 0
        self.waits = 0  # times a worker waited for room
        self._next: int | None = None  # the position of the batch the caller takes next
        self._charges: dict[int, int] = {}  # position -> bytes charged to its batch
        self._closed = False

    def admit(self, position: int, items: int = 1) -> int:
        """Wait until the batch at ``position`` may fetch ``items`` more items (at once for
        the batch the caller needs next: an item larger than the budget waits for its batch
        to be needed), and reserve the bytes they are expected to take; the reservation, to
        give to :meth:`charge`."""
        with self._cond:
            waited = False
            while True:
                expected = (self.limit if self.expected is None else self.expected) * items
                held = self.used + self.reserved
                if self._closed or position == self._next or held + expected <= self.limit:
                    break
                waited = True
                self._cond.wait()
            self.waits += waited
            self.reserved += expected
            return expected

    def charge(self, position: int, size: int, reserved: int = 0, items: int = 1) -> None:
        """The ``items`` admitted with ``reserved`` bytes took ``size`` (0 for a failure):
        charged to the batch at ``position``; room left by a smaller item is given back. An
        item larger than reserved that does not fit waits for room first, as it would have
        before being fetched (the batch needed next never waits)."""
        with self._cond:
            self.reserved -= reserved
            if size > reserved:
                waited = False
                while not self._closed and position != self._next:
                    if self.used + self.reserved + size <= self.limit:
                        break
                    waited = True
                    self._cond.wait()
                self.waits += waited
            self.used += size
            self._charges[position] = self._charges.get(position, 0) + size
            if size and (self.expected is None or size // items > self.expected):
                self.expected = -(-size // items)
            if self.used > self.peak:
                self.peak = self.used
            if reserved:
                self._cond.notify_all()

    def taken(self, position: int, next_position: int | None) -> None:
        """The caller took the batch at ``position`` and needs ``next_position`` next."""
        with self._cond:
            self.used -= self._charges.pop(position, 0)
            self._next = next_position
            self._cond.notify_all()

    def release(self, position: int) -> None:
        """The caller took the batch at ``position``: its bytes are given back (the batch
        needed next is told apart, by :meth:`needs`)."""
        with self._cond:
            self.used -= self._charges.pop(position, 0)
            self._cond.notify_all()

    def needs(self, position: int | None) -> None:
        """The caller needs the batch at ``position`` next (None: none here): it is admitted
        whatever the budget says."""
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
