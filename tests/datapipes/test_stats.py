"""stats(): every node counts items in and out, errors, skipped items, time busy, time
waiting on its source and on its consumer, and its peak of buffered results. Counts are
checked exactly; times only for being counted at all (>= 0, or > 0 where a sleep makes
them so)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest

import datapipes as dp
from tests.fixtures.pipes import AsyncFailingAt, collect_outcomes, failing_at

TIME_FIELDS = ("busy_s", "wait_source_s", "wait_consumer_s")
COUNT_FIELDS = ("items_in", "items_out", "errors", "skipped", "peak_buffered")


def counts(stats: dict[str, Any]) -> dict[str, int]:
    return {k: stats[k] for k in COUNT_FIELDS}


def assert_times_counted(stats: dict[str, Any]) -> None:
    for field in TIME_FIELDS:
        assert isinstance(stats[field], float) and stats[field] >= 0.0


class SlowSource:
    """range(n), sleeping a little before each item: the node waits on its source."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            time.sleep(0.002)
            yield i


def test_stats_fields_and_snapshot() -> None:
    node = dp.Batcher(range(5), 2, drop_last=True)
    list(node)
    snapshot = node.node_stats()
    assert isinstance(snapshot, dp.NodeStats)
    assert snapshot.name == "Batcher"
    as_dict = node.stats()
    assert {f.name for f in dataclasses.fields(dp.NodeStats)} | {"source"} == set(as_dict)
    assert as_dict["source"]["name"] == "IterableWrapper"
    # A snapshot is a value: later epochs do not change it.
    list(node)
    assert snapshot.items_out == 2 and node.node_stats().items_out == 4


def test_thread_mapper_counts_exactly() -> None:
    fn = failing_at(3, 6)

    def slow_fn(x: int) -> int:
        time.sleep(0.002)
        return fn(x)

    node = dp.ThreadMapper(SlowSource(10), slow_fn, num_threads=2, max_pending=1)
    it = iter(node)
    time.sleep(0.05)  # a slow consumer: finished results wait for it
    outcomes = collect_outcomes(it)
    assert len(outcomes) == 10
    stats = node.stats()
    # Errors are handed out too, at their place; at most num_threads + max_pending results wait.
    peak = stats["peak_buffered"]
    assert 1 <= peak <= 3
    assert counts(stats) == {"items_in": 10, "items_out": 10, "errors": 2, "skipped": 0, "peak_buffered": peak}
    assert_times_counted(stats)
    assert stats["busy_s"] > 0 and stats["wait_source_s"] > 0 and stats["wait_consumer_s"] > 0
    assert stats["source"]["items_out"] == 10


def test_thread_mapper_counts_skipped_items() -> None:
    node = dp.ThreadMapper(range(10), failing_at(0, 9), num_threads=3, on_error="skip")
    assert list(node) == list(range(1, 9))
    stats = node.stats()
    assert (stats["items_in"], stats["items_out"], stats["errors"], stats["skipped"]) == (10, 8, 2, 2)


def test_stats_are_summed_over_epochs() -> None:
    node = dp.ThreadMapper(range(7), lambda x: x, num_threads=2)
    list(node)
    list(node)
    stats = node.stats()
    assert (stats["items_in"], stats["items_out"]) == (14, 14)
    assert stats["source"]["items_out"] == 14


def test_async_fetcher_counts_exactly() -> None:
    fn = AsyncFailingAt(2, 5, 8)

    async def slow_fn(x: int) -> int:
        await asyncio.sleep(0.002)
        return await fn(x)

    node = dp.AsyncFetcher(SlowSource(12), slow_fn, max_concurrency=3, name="fetch")
    try:
        it = iter(node)
        next(it)
        time.sleep(0.05)  # a slow consumer: finished results wait for it
        outcomes = collect_outcomes(it)
        assert len(outcomes) == 11
        stats = node.stats()
        assert stats["name"] == "fetch"
        assert (stats["items_in"], stats["items_out"], stats["errors"], stats["skipped"]) == (12, 12, 3, 0)
        assert 1 <= stats["peak_buffered"] <= 3
        assert_times_counted(stats)
        assert stats["busy_s"] > 0 and stats["wait_source_s"] > 0 and stats["wait_consumer_s"] > 0
    finally:
        node.close()


def test_async_fetcher_counts_skipped_items() -> None:
    node = dp.AsyncFetcher(range(10), AsyncFailingAt(4), max_concurrency=4, on_error="skip")
    try:
        assert list(node) == [0, 1, 2, 3, 5, 6, 7, 8, 9]
        stats = node.stats()
        assert (stats["items_in"], stats["items_out"], stats["errors"], stats["skipped"]) == (10, 9, 1, 1)
    finally:
        node.close()


def test_prefetcher_counts_and_peak_is_its_depth_and_the_pull_at_most() -> None:
    node = dp.Prefetcher(range(20), depth=3)
    it = iter(node)
    time.sleep(0.05)  # the prefetcher fills up meanwhile
    assert list(it) == list(range(20))
    stats = node.stats()
    assert (stats["items_in"], stats["items_out"], stats["errors"]) == (20, 20, 0)
    assert 1 <= stats["peak_buffered"] <= 3 + 1  # in the node: depth ready, one being pulled
    assert_times_counted(stats)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: dp.Sampler(9), {"items_out": 9}),
        (lambda: dp.IterableWrapper(range(4)), {"items_in": 4, "items_out": 4}),
        (lambda: dp.Batcher(range(10), 3), {"items_in": 10, "items_out": 4}),
        (lambda: dp.Batcher(range(10), 3, drop_last=True), {"items_in": 10, "items_out": 3}),
        (lambda: dp.Unbatcher([[1, 2], [], [3]]), {"items_in": 3, "items_out": 3}),
        (lambda: dp.Filter(range(10), lambda x: x % 2 == 0), {"items_in": 10, "items_out": 5, "skipped": 5}),
        (lambda: dp.Header(range(100), 3), {"items_in": 3, "items_out": 3}),
        (lambda: dp.Collator([[1], [2, 3]]), {"items_in": 2, "items_out": 2}),
        (lambda: dp.Shuffler(range(20), 6, seed=0), {"items_in": 20, "items_out": 20, "peak_buffered": 6}),
        (lambda: dp.Reorderer([(1, "b"), (0, "a"), (2, "c")], 2), {"items_in": 3, "items_out": 3, "peak_buffered": 2}),
    ],
)
def test_sync_nodes_count_exactly(make: Any, expected: dict[str, int]) -> None:
    node = make()
    list(node)
    stats = node.stats()
    want = dict.fromkeys(COUNT_FIELDS, 0) | expected
    assert counts(stats) == want
    assert_times_counted(stats)


def test_collator_and_filter_count_errors() -> None:
    def collate(batch: list[int]) -> int:
        if batch == [2, 3]:
            raise ValueError
        time.sleep(0.001)
        return sum(batch)

    node = dp.Collator(dp.Batcher(range(6), 2), collate)
    outcomes = collect_outcomes(iter(node))
    assert [o for o in outcomes if not isinstance(o, Exception)] == [1, 9]
    stats = node.stats()
    assert (stats["items_in"], stats["items_out"], stats["errors"]) == (3, 2, 1)
    assert stats["busy_s"] > 0

    node2 = dp.Filter(range(4), lambda x: 1 // (x - 2) != 0)
    collect_outcomes(iter(node2))
    assert node2.stats()["errors"] == 1


def test_counters_are_exact_under_concurrent_updates() -> None:
    # Many threads add at once; a counter relying on the GIL's atomicity would lose updates
    # on free-threaded builds. The counter's lock makes the sum exact anyway.
    node = dp.ThreadMapper(range(2000), lambda x: x, num_threads=8, max_pending=8, in_order=False)
    assert len(list(node)) == 2000
    stats = node.stats()
    assert (stats["items_in"], stats["items_out"]) == (2000, 2000)
