"""Order: in_order=True keeps source order, in_order=False yields in completion order, and
both yield every item exactly once. Items finish in a chosen order through reversed
durations (earlier items sleep longer) or gates, never through timing assertions."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import datapipes as dp
from tests.fixtures.pipes import async_reversed_durations, reversed_durations
from tests.fixtures.threads import wait_until

N = 24


def thread_mapper(fn: Callable[[int], Any], *, in_order: bool, n: int = N) -> dp.Node[Any]:
    return dp.ThreadMapper(range(n), fn, num_threads=4, max_pending=4, in_order=in_order)


def async_fetcher(fn: Callable[[int], Any], *, in_order: bool, n: int = N) -> dp.Node[Any]:
    return dp.AsyncFetcher(range(n), fn, max_concurrency=8, in_order=in_order)


def test_thread_mapper_in_order_keeps_source_order_under_reversed_durations() -> None:
    assert list(thread_mapper(reversed_durations(N), in_order=True)) == list(range(N))


def test_async_fetcher_in_order_keeps_source_order_under_reversed_durations(close_after: list[Any]) -> None:
    node = async_fetcher(async_reversed_durations(N), in_order=True)
    close_after.append(node)
    assert list(node) == list(range(N))


def test_prefetcher_over_reversed_durations_keeps_order() -> None:
    node = dp.Prefetcher(thread_mapper(reversed_durations(N), in_order=True), depth=3)
    assert list(node) == list(range(N))


def test_in_order_holds_even_when_later_items_certainly_finish_first() -> None:
    # Item 0 waits until items 1, 2 and 3 have finished: they certainly finish first.
    finished = threading.Condition()
    done: set[int] = set()

    def fn(x: int) -> int:
        with finished:
            if x == 0:
                finished.wait_for(lambda: {1, 2, 3} <= done)
            done.add(x)
            finished.notify_all()
        return x

    assert list(dp.ThreadMapper(range(10), fn, num_threads=4, max_pending=3)) == list(range(10))


def test_async_in_order_holds_even_when_later_items_certainly_finish_first(close_after: list[Any]) -> None:
    # Item 0 waits until items 1, 2 and 3 have finished. All coroutines run on the fetcher's
    # one loop thread, so the counter needs no lock.
    done: set[int] = set()

    async def fn(x: int) -> int:
        while x == 0 and not {1, 2, 3} <= done:
            await asyncio.sleep(0.001)
        done.add(x)
        return x

    node = dp.AsyncFetcher(range(10), fn, max_concurrency=4)
    close_after.append(node)
    assert list(node) == list(range(10))


def gated_first_item() -> tuple[Callable[[int], int], Callable[[], None]]:
    """fn where item 0 blocks until ``release()``; the consumer releases it."""
    gate = threading.Event()

    def fn(x: int) -> int:
        if x == 0:
            gate.wait()
        return x

    return fn, gate.set


def test_thread_mapper_out_of_order_yields_a_slow_item_later() -> None:
    fn, release = gated_first_item()
    it = iter(dp.ThreadMapper(range(N), fn, num_threads=3, max_pending=2, in_order=False))
    first = [next(it) for _ in range(5)]  # item 0 is still blocked: these are others
    release()
    rest = list(it)
    assert 0 not in first
    assert 0 in rest
    assert sorted(first + rest) == list(range(N))


def test_out_of_order_a_thread_stuck_in_a_call_never_holds_the_feed() -> None:
    """Item 0 is stuck on thread 0; every other thread is in a call too when the consumer
    makes room (each holds its share, one item): the feed (the pull of the next items) must
    not wait behind the stuck call, but run on the first thread that is free. It was queued
    on the thread holding the fewest items, thread 0 on a tie, and the epoch hung once
    items 3 and 4 were done (seen on 3.13t, where the feed of the first next() ends before
    the consumer makes room again)."""
    stuck, later = threading.Event(), threading.Event()
    lock = threading.Lock()
    done: set[int] = set()
    started: set[int] = set()

    def fn(x: int) -> int:
        with lock:
            started.add(x)
        if x == 0:
            stuck.wait()
        if x in (3, 4):
            later.wait()
        with lock:
            done.add(x)
        return x

    it = iter(dp.ThreadMapper(range(N), fn, num_threads=3, max_pending=2, in_order=False))  # one item per thread
    try:
        assert wait_until(lambda: {1, 2} <= done, 10), "never happened: items 1 and 2 run"
        time.sleep(0.2)  # their results are queued: the first next() takes both in
        first = next(it)
        assert wait_until(lambda: {3, 4} <= started, 10), (
            "never happened: the feed pulls items 3 and 4 onto threads 1 and 2"
        )
        second = next(it)  # room made while every thread is in a call
        later.set()
        got: list[int] = []
        consumer = threading.Thread(target=lambda: got.extend(next(it) for _ in range(3)), daemon=True)
        consumer.start()
        consumer.join(10)
        hung = consumer.is_alive()
    finally:
        stuck.set()
        later.set()
    consumer.join(10)  # the stuck call returned: its thread runs the feed at last
    rest = list(it)
    assert not hung, f"the epoch hung after {got}: its feed waited behind the stuck item"
    assert sorted([first, second, *got, *rest]) == list(range(N))


def test_out_of_order_the_feed_never_waits_behind_a_stuck_call_whatever_the_schedule() -> None:
    """The schedule above, left to chance 100 times: when the consumer makes room, the
    threads that finished their items may still count them as theirs (the consumer has not
    taken their results in yet), so the feed was queued on the stuck thread, which holds as
    few, while the others waited idle for work: 11 of 300 such epochs hung on 3.13t, none on
    3.11. Now it goes to a thread not in a call."""
    for round_ in range(100):
        fn, release = gated_first_item()
        it = iter(dp.ThreadMapper(range(N), fn, num_threads=3, max_pending=2, in_order=False))
        got: list[int] = []
        consumer = threading.Thread(target=take_into, args=(it, 5, got), daemon=True)
        consumer.start()
        consumer.join(10)
        hung = consumer.is_alive()
        release()
        consumer.join(10)
        rest = list(it)
        assert not hung, f"round {round_}: the epoch hung after {got}, its feed queued behind the stuck item"
        assert 0 not in got and sorted(got + rest) == list(range(N))


def take_into(it: Any, n: int, into: list[Any]) -> None:
    into.extend(next(it) for _ in range(n))


def test_async_fetcher_out_of_order_yields_a_slow_item_later(close_after: list[Any]) -> None:
    gate = threading.Event()

    async def fn(x: int) -> int:
        if x == 0:
            while not gate.is_set():  # the gate is set from the consumer's thread
                await asyncio.sleep(0.005)
        return x

    node = dp.AsyncFetcher(range(N), fn, max_concurrency=4, in_order=False)
    close_after.append(node)
    it = iter(node)
    first = [next(it) for _ in range(5)]
    gate.set()
    rest = list(it)
    assert 0 not in first
    assert sorted(first + rest) == list(range(N))


def _take_releasing_the_previous(it: Any, gates: list[threading.Event]) -> list[int]:
    """Takes four items; on getting item i > 0, lets item i - 1 finish."""
    out = []
    for expected in (3, 2, 1, 0):
        out.append(next(it))
        if expected:
            gates[expected - 1].set()
    return out


def test_thread_mapper_out_of_order_yields_exactly_the_completion_order() -> None:
    # Item i may finish only once the consumer holds item i + 1 (the last finishes at once),
    # so the items finish in the order 3, 2, 1, 0; the consumer gets them in that order.
    gates = [threading.Event() for _ in range(4)]
    gates[3].set()

    def fn(x: int) -> int:
        gates[x].wait()
        return x

    it = iter(dp.ThreadMapper(range(4), fn, num_threads=4, max_pending=4, in_order=False))
    assert _take_releasing_the_previous(it, gates) == [3, 2, 1, 0]
    assert list(it) == []


def test_async_fetcher_out_of_order_yields_exactly_the_completion_order(close_after: list[Any]) -> None:
    gates = [threading.Event() for _ in range(4)]
    gates[3].set()

    async def fn(x: int) -> int:
        while not gates[x].is_set():  # set from the consumer's thread
            await asyncio.sleep(0.002)
        return x

    node = dp.AsyncFetcher(range(4), fn, max_concurrency=4, in_order=False)
    close_after.append(node)
    it = iter(node)
    assert _take_releasing_the_previous(it, gates) == [3, 2, 1, 0]


def test_thread_mapper_out_of_order_under_reversed_durations_yields_each_item_once() -> None:
    out = list(thread_mapper(reversed_durations(N), in_order=False))
    assert sorted(out) == list(range(N))
    # (Which comes first depends on when each thread started its sleep; the gated test above
    # shows deterministically that a slow item comes out later.)


def test_async_fetcher_out_of_order_under_reversed_durations_yields_each_item_once(close_after: list[Any]) -> None:
    node = async_fetcher(async_reversed_durations(N), in_order=False)
    close_after.append(node)
    out = list(node)
    assert sorted(out) == list(range(N))


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("num_threads", [1, 2, 5])
@pytest.mark.parametrize("max_pending", [0, 1, 3])
def test_thread_mapper_yields_every_item_exactly_once(in_order: bool, num_threads: int, max_pending: int) -> None:
    node = dp.ThreadMapper(range(200), lambda x: x, num_threads=num_threads, max_pending=max_pending, in_order=in_order)
    out = list(node)
    assert sorted(out) == list(range(200))
    if in_order:
        assert out == list(range(200))


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("max_concurrency", [1, 3, 16])
def test_async_fetcher_yields_every_item_exactly_once(
    in_order: bool, max_concurrency: int, close_after: list[Any]
) -> None:
    async def fn(x: int) -> int:
        await asyncio.sleep(0.001 * (x % 3))
        return x

    node = dp.AsyncFetcher(range(100), fn, max_concurrency=max_concurrency, in_order=in_order)
    close_after.append(node)
    out = list(node)
    assert sorted(out) == list(range(100))
    if in_order:
        assert out == list(range(100))
