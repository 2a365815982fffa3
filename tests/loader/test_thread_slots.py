"""ThreadItemSlots: the bound on the items in flight of an epoch on worker threads, given in
the epoch's order, and woken by a close."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_threadloader.fetch.thread_slots import ThreadItemSlots

keys = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=12, unique=True)
PATIENCE = 60.0  # (so that a failure fails, not hangs)


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def _waiters(slots: ThreadItemSlots, order: list[tuple[int, int]]) -> tuple[list[threading.Thread], queue.Queue]:
    """One thread per key, each asking for a slot (all wait: the test holds every slot)."""
    granted: queue.Queue = queue.Queue()
    threads = [threading.Thread(target=lambda k=key: granted.put((k, slots.acquire(k)))) for key in order]
    for thread in threads:
        thread.start()
    _until(lambda: slots.waiting == len(order), "every item waits for a slot")
    return threads, granted


@settings(max_examples=25, deadline=None)
@given(keys, st.integers(1, 3))
def test_a_freed_slot_goes_to_the_earliest_waiting_item(order, limit):
    slots = ThreadItemSlots(limit)
    for _ in range(limit):  # the test holds every slot
        assert slots.acquire((-1, 0))
    threads, granted = _waiters(slots, order)
    got = []
    for _ in order:
        slots.release()
        got.append(granted.get(timeout=PATIENCE))  # the one woken took the freed slot
    for thread in threads:
        thread.join()
    assert got == [(key, True) for key in sorted(order)]
    assert slots.in_flight == limit  # each freed slot went on to a waiter
    for _ in range(limit):
        slots.release()
    assert slots.in_flight == 0


def test_free_slots_are_taken_without_waiting_and_counted():
    slots = ThreadItemSlots(2)
    assert slots.acquire((5, 0)) and slots.acquire((0, 0))
    assert slots.in_flight == 2 and slots.waiting == 0
    slots.release()
    assert slots.in_flight == 1


def test_close_wakes_every_waiter_which_takes_nothing():
    slots = ThreadItemSlots(1)
    assert slots.acquire((0, 0))
    threads, granted = _waiters(slots, [(1, 0), (2, 0), (3, 1)])
    slots.close()
    for thread in threads:
        thread.join()
    assert sorted(granted.get_nowait() for _ in threads) == [((1, 0), False), ((2, 0), False), ((3, 1), False)]
    assert not slots.acquire((0, 1))  # refused after the close
    slots.release()
    assert slots.in_flight == 0


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ThreadItemSlots(0)
