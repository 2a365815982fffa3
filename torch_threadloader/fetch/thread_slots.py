"""ThreadItemSlots: the bound on the items in flight of an epoch whose batches load on worker
threads, shared by every batch loading, each freed slot given to the waiting item first in the
epoch's order (the threads' twin of :class:`~torch_threadloader.fetch.item_slots.ItemSlots`)."""

from __future__ import annotations

import heapq
import threading

from torch_threadloader.fetch.item_slots import ItemKey

__all__ = ["ThreadItemSlots"]


class _Waiter:
    __slots__ = ("granted", "wake")

    def __init__(self, lock: threading.Lock) -> None:
        self.granted = False
        self.wake = threading.Condition(lock)


class ThreadItemSlots:
    """At most ``limit`` items in flight at once, across every batch of the epoch that is
    loading: an item takes a slot (:meth:`acquire`) before it is started and gives it back
    (:meth:`release`) when it ends, and a freed slot goes at once to the waiting item with the
    smallest :data:`~torch_threadloader.fetch.item_slots.ItemKey` (the earliest in the epoch's
    order), never to a later one first.

    Any thread; all state under one lock, each waiter woken alone (no polling). :meth:`close`
    wakes every waiter: :meth:`acquire` then returns False, taking nothing (the epoch is closing).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"ThreadItemSlots needs a limit of at least 1, got {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._free = limit  # > 0 only while nobody waits
        self._waiting: list[tuple[ItemKey, int, _Waiter]] = []  # a heap by key (then arrival)
        self._arrivals = 0
        self._closed = False

    @property
    def in_flight(self) -> int:
        """How many slots are taken."""
        with self._lock:
            return self.limit - self._free

    @property
    def waiting(self) -> int:
        """How many items wait for a slot."""
        with self._lock:
            return len(self._waiting)

    def acquire(self, key: ItemKey) -> bool:
        """Take a slot for item ``key``, waiting (behind every earlier key) while none is free;
        False, with no slot taken, once the slots are closed."""
        with self._lock:
            if self._closed:
                return False
            if self._free:
                self._free -= 1
                return True
            waiter = _Waiter(self._lock)
            self._arrivals += 1
            heapq.heappush(self._waiting, (key, self._arrivals, waiter))
            while not waiter.granted and not self._closed:
                waiter.wake.wait()
            if waiter.granted and self._closed:
                self._give()  # granted as the slots closed: given back, not used
                return False
            return waiter.granted

    def release(self) -> None:
        """Give a slot back: to the earliest waiting item, else to the free ones."""
        with self._lock:
            self._give()

    def _give(self) -> None:
        """A slot freed, under the lock: to the first waiter, else counted free."""
        if self._waiting and not self._closed:
            _, _, waiter = heapq.heappop(self._waiting)
            waiter.granted = True
            waiter.wake.notify()
            return
        self._free += 1

    def close(self) -> None:
        """Wake every waiter (its :meth:`acquire` returns False) and refuse later ones.
        Idempotent; slots released after it are counted free."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            for _, _, waiter in waiting:
                waiter.wake.notify()
