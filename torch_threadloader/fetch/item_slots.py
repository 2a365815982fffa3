"""ItemSlots: the bound on the items of an async epoch in flight, shared by every batch loading,
each freed slot given to the waiting item first in the epoch's order."""

from __future__ import annotations

import asyncio
import heapq

__all__ = ["ItemKey", "ItemSlots"]

#: An item's place in the epoch's order: ``(batch position, index in the batch)``.
ItemKey = tuple[int, int]


class ItemSlots:
    """At most ``limit`` items in flight at once, across every batch of the epoch that is
    loading: an item takes a slot (:meth:`acquire`) before it is awaited and gives it back
    (:meth:`release`) when it ends, and a freed slot goes at once to the waiting item with the
    smallest :data:`ItemKey` (the earliest in the epoch's order), never to a later one first.

    One event loop's thread only (no lock: the loop's tasks run one at a time). A waiter that
    is cancelled leaves the queue; one cancelled just after it was given a slot gives it on.
    """

    __slots__ = ("_waiting", "free", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"ItemSlots needs a limit of at least 1, got {limit}")
        self.limit = limit
        self.free = limit  # > 0 only while nobody waits
        self._waiting: list[tuple[ItemKey, asyncio.Future[None]]] = []  # a heap by key

    @property
    def in_flight(self) -> int:
        """How many slots are taken."""
        return self.limit - self.free

    async def acquire(self, key: ItemKey) -> None:
        """Take a slot for item ``key``, waiting (behind every earlier key) while none is free."""
        if self.free:
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (key, waiter)
        heapq.heappush(self._waiting, entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # given a slot, then cancelled before it ran: give it on
            elif entry in self._waiting:  # (a release may have dropped it already)
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
            raise

    def release(self) -> None:
        """Give a slot back: to the earliest waiting item, else to the free ones."""
        while self._waiting:
            _, waiter = heapq.heappop(self._waiting)
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1

    async def pass_on(self, key: ItemKey) -> None:
        """The holder of a slot goes on to its next item ``key``: it keeps the slot unless an
        earlier item waits, which then gets it first."""
        if self._waiting and self._waiting[0][0] < key:
            self.release()
            await self.acquire(key)
