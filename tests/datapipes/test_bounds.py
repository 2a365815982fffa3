"""Bounds, proven with peak-in-flight counters under (a) a slow consumer and (b) one very
slow item. The counters are lock-protected and read by the test; nothing is timed.

``CountingRange.in_node()`` is how many items were pulled from the source and not yet
consumed. The consumer reads it between its ``next()`` calls, when no item is on its way to
it, so there it is exactly the number of items inside the node."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import datapipes as dp
from tests.fixtures.datasets import PeakCounter
from tests.fixtures.pipes import CountingRange

N_ITEMS = 40
SLOW_INDEX = 3
SLOW_S = 0.25
CONSUMER_PAUSE_S = 0.004

MAPPER_BOUNDS = [(1, 0), (1, 2), (2, 1), (3, 0), (4, 3)]


def consume(it: Iterator[Any], src: CountingRange, *, pause: float = 0.0) -> tuple[list[Any], int]:
    """Drain ``it``, pausing after each item; returns the items and the peak of ``in_node()``
    seen between ``next()`` calls."""
    out: list[Any] = []
    peak = src.in_node()
    for x in it:
        src.consume()
        out.append(x)
        if pause:
            time.sleep(pause)  # a slow consumer: the node fills up meanwhile
        peak = max(peak, src.in_node())
    return out, peak


# -- ThreadMapper ---------------------------------------------------------------------------


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize(("num_threads", "max_pending"), MAPPER_BOUNDS)
def test_thread_mapper_bounds_under_a_slow_consumer(num_threads: int, max_pending: int, in_order: bool) -> None:
    src, running = CountingRange(N_ITEMS), PeakCounter()

    def fn(x: int) -> int:
        with running:
            time.sleep(0.001)
            return x

    node = dp.ThreadMapper(src, fn, num_threads=num_threads, max_pending=max_pending, in_order=in_order)
    out, peak_in_node = consume(iter(node), src, pause=CONSUMER_PAUSE_S)
    assert sorted(out) == list(range(N_ITEMS))
    assert running.peak <= num_threads
    assert peak_in_node <= num_threads + max_pending
    # Finished results wait in the node's one bound (torch's: items handed out, not consumed).
    assert 1 <= node.stats()["peak_buffered"] <= num_threads + max_pending


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize(("num_threads", "max_pending"), MAPPER_BOUNDS)
def test_thread_mapper_bounds_under_one_very_slow_item(num_threads: int, max_pending: int, in_order: bool) -> None:
    src, running = CountingRange(N_ITEMS), PeakCounter()
    pull_time_peak = PeakPulls(src)

    def fn(x: int) -> int:
        pull_time_peak.sample()
        with running:
            if x == SLOW_INDEX:
                time.sleep(SLOW_S)
            return x

    node = dp.ThreadMapper(src, fn, num_threads=num_threads, max_pending=max_pending, in_order=in_order)
    out, peak_in_node = consume(iter(node), src)
    assert sorted(out) == list(range(N_ITEMS))
    assert running.peak <= num_threads
    assert peak_in_node <= num_threads + max_pending
    # Sampled from the workers, in_node() may also count the one item on its way to the
    # consumer (handed over, not yet counted as consumed): one more than the bound at most.
    assert pull_time_peak.peak <= num_threads + max_pending + 1
    assert node.stats()["peak_buffered"] <= num_threads + max_pending


class PeakPulls:
    """The peak of ``src.in_node()`` sampled inside ``fn`` (so: during the slow item too)."""

    def __init__(self, src: CountingRange) -> None:
        self._src = src
        self._lock = threading.Lock()
        self.peak = 0

    def sample(self) -> None:
        value = self._src.in_node()
        with self._lock:
            self.peak = max(self.peak, value)


def test_thread_mapper_default_max_pending_is_num_threads() -> None:
    src = CountingRange(N_ITEMS)
    node = dp.ThreadMapper(src, lambda x: x, num_threads=3)
    assert node.max_pending == 3
    _, peak_in_node = consume(iter(node), src, pause=CONSUMER_PAUSE_S)
    assert peak_in_node <= 6


def test_thread_mapper_bound_holds_with_a_stalled_consumer() -> None:
    # The consumer takes two items and stops for a while: the node must stop pulling at
    # num_threads + max_pending items, however long the pause.
    src = CountingRange(1000)
    it = iter(dp.ThreadMapper(src, lambda x: x, num_threads=2, max_pending=3))
    for _ in range(2):
        next(it)
        src.consume()
    time.sleep(0.2)  # gives an unbounded node time to run ahead; asserts nothing about time
    assert src.in_node() <= 5
    it.close()


def test_thread_mapper_pulls_the_source_off_the_consumers_thread_once_the_epoch_is_open() -> None:
    # After the epoch's first items (pulled where the epoch opens, as torch primes
    # its workers), next() only takes a finished item; each further item is pulled, and its
    # state snapshotted, on a worker thread, so the training step's wait is a hand-off.
    pulled_on: list[threading.Thread] = []

    def source() -> Iterator[int]:
        for i in range(30):
            pulled_on.append(threading.current_thread())
            yield i

    node = dp.ThreadMapper(dp.IterableWrapper(source()), lambda x: x, num_threads=2, max_pending=2)
    assert list(node) == list(range(30))
    me = threading.current_thread()
    assert [t is me for t in pulled_on[:4]] == [True] * 4
    assert [t.name for t in pulled_on[4:] if t is me] == []


# -- Prefetcher -----------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_prefetcher_bounds_under_a_slow_consumer(depth: int) -> None:
    src = CountingRange(N_ITEMS)
    node = dp.Prefetcher(src, depth=depth)
    out, peak_in_node = consume(iter(node), src, pause=CONSUMER_PAUSE_S)
    assert out == list(range(N_ITEMS))
    assert peak_in_node <= depth + 1  # depth waiting for the consumer, one being pulled
    assert node.stats()["peak_buffered"] <= depth + 1  # in the node: depth ready, one being pulled


@pytest.mark.parametrize("depth", [1, 3])
def test_prefetcher_bounds_under_one_very_slow_item(depth: int) -> None:
    src = CountingRange(N_ITEMS)
    slow = dp.ThreadMapper(
        src, lambda x: time.sleep(SLOW_S if x == SLOW_INDEX else 0) or x, num_threads=2, max_pending=1
    )
    node = dp.Prefetcher(slow, depth=depth)
    out, peak_in_node = consume(iter(node), src)
    assert out == list(range(N_ITEMS))
    assert peak_in_node <= (2 + 1) + (depth + 1)  # the mapper's bound plus the prefetcher's
    assert node.stats()["peak_buffered"] <= depth + 1  # in the node: depth ready, one being pulled


# -- AsyncFetcher ---------------------------------------------------------------------------


class LoopProbe:
    """Records, for each coroutine, the peak in flight and the thread and loop it ran on."""

    def __init__(self) -> None:
        self.running = PeakCounter()
        self._lock = threading.Lock()
        self.thread_names: set[str] = set()
        self.threads: set[threading.Thread] = set()
        self.loops: set[asyncio.AbstractEventLoop] = set()

    def record(self) -> None:
        with self._lock:
            self.thread_names.add(threading.current_thread().name)
            self.threads.add(threading.current_thread())
            self.loops.add(asyncio.get_running_loop())


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("max_concurrency", [1, 3, 8])
def test_async_fetcher_bounds_under_a_slow_consumer(
    max_concurrency: int, in_order: bool, close_after: list[Any]
) -> None:
    src, probe = CountingRange(N_ITEMS), LoopProbe()

    async def fn(x: int) -> int:
        probe.record()
        with probe.running:
            await asyncio.sleep(0.001)
            return x

    node = dp.AsyncFetcher(src, fn, max_concurrency=max_concurrency, in_order=in_order, name="fetch")
    close_after.append(node)
    out, peak_in_node = consume(iter(node), src, pause=CONSUMER_PAUSE_S)
    assert sorted(out) == list(range(N_ITEMS))
    assert probe.running.peak <= max_concurrency
    assert peak_in_node <= max_concurrency
    assert node.stats()["peak_buffered"] <= max_concurrency
    assert probe.thread_names == {"fetch-loop"}
    assert len(probe.loops) == 1


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("max_concurrency", [1, 3, 8])
def test_async_fetcher_bounds_under_one_very_slow_item(
    max_concurrency: int, in_order: bool, close_after: list[Any]
) -> None:
    src, probe = CountingRange(N_ITEMS), LoopProbe()

    async def fn(x: int) -> int:
        probe.record()
        with probe.running:
            await asyncio.sleep(SLOW_S if x == SLOW_INDEX else 0)
            return x

    node = dp.AsyncFetcher(src, fn, max_concurrency=max_concurrency, in_order=in_order)
    close_after.append(node)
    out, peak_in_node = consume(iter(node), src)
    assert sorted(out) == list(range(N_ITEMS))
    assert probe.running.peak <= max_concurrency
    assert peak_in_node <= max_concurrency
    assert probe.thread_names == {"AsyncFetcher-loop"}


def test_async_fetcher_runs_every_epoch_on_its_one_loop_thread(close_after: list[Any]) -> None:
    probe = LoopProbe()

    async def fn(x: int) -> int:
        probe.record()
        await asyncio.sleep(0)
        return x

    node = dp.AsyncFetcher(range(20), fn, max_concurrency=4, name="images")
    close_after.append(node)
    before = set(threading.enumerate())
    assert list(node) == list(range(20))
    epoch_one_threads = set(probe.threads)
    assert list(node) == list(range(20))
    assert list(node) == list(range(20))
    assert probe.threads == epoch_one_threads  # the same thread object, epoch after epoch
    assert probe.thread_names == {"images-loop"}
    assert len(probe.loops) == 1  # one event loop: never one per item or per epoch
    started = [t for t in threading.enumerate() if t not in before]
    assert [t.name for t in started] == ["images-loop"]


def test_two_fetchers_have_one_named_loop_each(close_after: list[Any]) -> None:
    probe_a, probe_b = LoopProbe(), LoopProbe()

    def fetch_fn(probe: LoopProbe) -> Any:
        async def fn(x: int) -> int:
            probe.record()
            return x

        return fn

    a = dp.AsyncFetcher(range(5), fetch_fn(probe_a), name="a")
    b = dp.AsyncFetcher(a, fetch_fn(probe_b), name="b")
    close_after.extend([a, b])
    assert list(b) == list(range(5))
    assert probe_a.thread_names == {"a-loop"}
    assert probe_b.thread_names == {"b-loop"}
    assert probe_a.loops.isdisjoint(probe_b.loops)


def test_async_fetcher_on_a_shared_loop_starts_no_thread() -> None:
    probe = LoopProbe()

    async def fn(x: int) -> int:
        probe.record()
        return x

    loop = dp.EventLoopThread("shared-loop")
    try:
        before = set(threading.enumerate())
        a = dp.AsyncFetcher(range(5), fn, loop=loop)
        b = dp.AsyncFetcher(range(5), fn, loop=loop)
        assert list(a) == list(b) == list(range(5))
        a.close()  # a loop passed in is its owner's to close
        assert list(b) == list(range(5))
        assert [t for t in threading.enumerate() if t not in before] == []
        assert probe.thread_names == {"shared-loop"}
    finally:
        loop.close()
