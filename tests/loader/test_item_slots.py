"""ItemSlots: the async epoch's bound on items in flight, given in the epoch's order."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_threadloader.fetch.item_slots import ItemSlots

keys = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=30, unique=True)


async def _run_items(slots: ItemSlots, order: list[tuple[int, int]], holds: list[int], cancel: set[int]) -> list:
    started: list[tuple[int, int]] = []
    peak = [0]

    async def item(key: tuple[int, int], hold: int) -> None:
        await slots.acquire(key)
        started.append(key)
        peak[0] = max(peak[0], slots.in_flight)
        try:
            for _ in range(hold + 1):  # (held past the first round: every item asks first)
                await asyncio.sleep(0)
        finally:
            slots.release()

    tasks = [asyncio.ensure_future(item(k, h)) for k, h in zip(order, holds, strict=True)]
    await asyncio.sleep(0)  # every item has asked (each task ran to its first wait)
    for i in cancel:
        tasks[i].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return [started, peak[0]]


@settings(max_examples=60, deadline=None)
@given(keys, st.integers(1, 5), st.data())
def test_a_freed_slot_goes_to_the_earliest_waiting_item(order, limit, data):
    holds = data.draw(st.lists(st.integers(0, 3), min_size=len(order), max_size=len(order)))
    slots = ItemSlots(limit)
    started, peak = asyncio.run(_run_items(slots, order, holds, set()))
    # The first `limit` take free slots as they ask; every later one in the epoch's order.
    assert started == order[:limit] + sorted(order[limit:])
    assert peak == min(limit, len(order))
    assert slots.free == limit


@settings(max_examples=60, deadline=None)
@given(keys, st.integers(1, 4), st.data())
def test_cancelled_waiters_leave_the_queue_and_no_slot_is_lost(order, limit, data):
    holds = data.draw(st.lists(st.integers(0, 3), min_size=len(order), max_size=len(order)))
    cancel = set(data.draw(st.lists(st.integers(0, len(order) - 1), max_size=len(order))))
    slots = ItemSlots(limit)
    started, peak = asyncio.run(_run_items(slots, order, holds, cancel))
    waiting = [k for i, k in enumerate(order[limit:], limit) if i not in cancel]
    assert started[limit:] == sorted(waiting)
    assert peak <= limit
    assert slots.free == limit


def test_pass_on_keeps_the_slot_unless_an_earlier_item_waits():
    async def main() -> list[str]:
        slots = ItemSlots(1)
        log: list[str] = []
        await slots.acquire((1, 0))
        await slots.pass_on((1, 1))  # nobody waits: kept at once
        log.append("kept")
        later = asyncio.ensure_future(_take(slots, (2, 0), log))
        earlier = asyncio.ensure_future(_take(slots, (0, 5), log))
        await asyncio.sleep(0)
        await slots.pass_on((1, 2))  # (0, 5) waits and is earlier: it goes first; (2, 0) after us
        log.append("(1, 2)")
        slots.release()
        await asyncio.gather(later, earlier)
        assert slots.free == 1
        return log

    assert asyncio.run(main()) == ["kept", "(0, 5)", "(1, 2)", "(2, 0)"]


async def _take(slots: ItemSlots, key: tuple[int, int], log: list[str]) -> None:
    await slots.acquire(key)
    log.append(str(key))
    slots.release()


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ItemSlots(0)


def test_a_waiter_cancelled_just_after_it_was_given_the_slot_gives_it_on():
    async def main() -> list[str]:
        slots = ItemSlots(1)
        log: list[str] = []
        await slots.acquire((0, 0))
        granted = asyncio.ensure_future(_take(slots, (1, 0), log))
        after = asyncio.ensure_future(_take(slots, (2, 0), log))
        await asyncio.sleep(0)  # both wait
        slots.release()  # given to (1, 0), which has not run yet
        granted.cancel()  # ... and is cancelled before it does
        await asyncio.gather(granted, after, return_exceptions=True)
        assert slots.free == 1
        return log

    assert asyncio.run(main()) == ["(2, 0)"]
