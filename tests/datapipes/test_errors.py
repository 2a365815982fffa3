"""Errors: a user function's exception is raised by the consumer's next() at that item's
place, as the same exception object (type and traceback), with a note naming the node and
the item; iteration goes on after it. on_error="skip" drops failed items and counts them."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

import datapipes as dp
from tests.fixtures.pipes import AsyncFailingAt, FailingAt, async_tenfold, collect_outcomes, failing_at, fetcher, mapper

N = 12
FAIL_AT = 7


FAILING_NODES: dict[str, tuple[Callable[..., dp.Node[Any]], type[FailingAt], str]] = {
    "ThreadMapper": (partial(mapper, N), FailingAt, "ThreadMapper"),
    "AsyncFetcher": (partial(fetcher, N), AsyncFailingAt, "AsyncFetcher"),
}


def user_frames(exc: BaseException) -> list[str]:
    return [frame.name for frame in traceback.extract_tb(exc.__traceback__)]


@pytest.mark.parametrize("kind", sorted(FAILING_NODES))
@pytest.mark.parametrize("exc_type", [ValueError, KeyError, TimeoutError, OSError])
def test_error_is_raised_at_its_place_as_the_same_object_with_a_note(
    kind: str, exc_type: type[Exception], close_after: list[Any]
) -> None:
    make, fn_type, node_name = FAILING_NODES[kind]
    fn = fn_type(FAIL_AT, exc_type=exc_type)
    node = make(fn)
    close_after.append(node)
    it = iter(node)
    assert [next(it) for _ in range(FAIL_AT)] == list(range(FAIL_AT))
    with pytest.raises(exc_type) as info:
        next(it)
    exc = info.value
    assert exc is fn.raised[FAIL_AT]
    assert type(exc) is exc_type
    notes = getattr(exc, "__notes__", [])
    assert len(notes) == 1
    assert node_name in notes[0]
    assert f"#{FAIL_AT}" in notes[0] and repr(FAIL_AT) in notes[0]
    assert "_fail" in user_frames(exc)  # the traceback still reaches the frame that raised
    # Iteration goes on with the next item.
    assert list(it) == list(range(FAIL_AT + 1, N))


@pytest.mark.parametrize("kind", sorted(FAILING_NODES))
@pytest.mark.parametrize("in_order", [True, False])
def test_iteration_goes_on_after_several_errors(kind: str, in_order: bool, close_after: list[Any]) -> None:
    make, fn_type, _ = FAILING_NODES[kind]
    fn = fn_type(0, 5, 6, N - 1)
    node = make(fn, in_order=in_order)
    close_after.append(node)
    outcomes = collect_outcomes(iter(node))
    assert len(outcomes) == N
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    values = [o for o in outcomes if not isinstance(o, BaseException)]
    assert sorted(values) == [i for i in range(N) if i not in fn.indices]
    assert {id(e) for e in errors} == {id(e) for e in fn.raised.values()}
    if in_order:
        assert outcomes == [fn.raised.get(i, i) for i in range(N)]


def test_the_note_names_a_named_node_and_the_item_value() -> None:
    def fn(x: str) -> str:
        raise RuntimeError("boom")

    it = iter(dp.ThreadMapper(["cat.jpg", "dog.jpg"], fn, name="decode"))
    with pytest.raises(RuntimeError) as info:
        next(it)
    assert "decode" in info.value.__notes__[0]
    assert "'cat.jpg'" in info.value.__notes__[0]
    it.close()


@pytest.mark.parametrize("kind", sorted(FAILING_NODES))
@pytest.mark.parametrize("in_order", [True, False])
def test_on_error_skip_drops_failed_items_and_counts_them(kind: str, in_order: bool, close_after: list[Any]) -> None:
    make, fn_type, _ = FAILING_NODES[kind]
    fn = fn_type(1, 4, 9)
    node = make(fn, on_error="skip", in_order=in_order)
    close_after.append(node)
    out = list(node)
    assert sorted(out) == [i for i in range(N) if i not in (1, 4, 9)]
    stats = node.stats()
    assert stats["skipped"] == 3
    assert stats["errors"] == 3
    assert stats["items_out"] == N - 3


def test_an_error_from_a_source_node_passes_through_as_the_same_object() -> None:
    fn = failing_at(3)
    inner = dp.ThreadMapper(range(8), fn, num_threads=2, name="inner")
    outer = dp.Prefetcher(dp.ThreadMapper(inner, lambda x: x, num_threads=2, name="outer"), depth=2)
    outcomes = collect_outcomes(iter(outer))
    assert outcomes == [0, 1, 2, fn.raised[3], 4, 5, 6, 7]
    notes = fn.raised[3].__notes__
    assert len(notes) == 1 and "inner" in notes[0]  # noted once, by the node whose fn raised


def test_on_error_skip_does_not_drop_source_errors() -> None:
    fn = failing_at(2)
    node = dp.ThreadMapper(dp.ThreadMapper(range(5), fn), lambda x: x, on_error="skip")
    assert collect_outcomes(iter(node)) == [0, 1, fn.raised[2], 3, 4]


def test_async_error_passes_through_a_thread_mapper(close_after: list[Any]) -> None:
    fn = AsyncFailingAt(2)
    fetch = dp.AsyncFetcher(range(5), fn, max_concurrency=2)
    close_after.append(fetch)
    node = fetch.map(lambda x: x * 10, num_threads=2)
    assert collect_outcomes(iter(node)) == [0, 10, fn.raised[2], 30, 40]


def test_a_source_error_passes_through_an_async_fetcher(close_after: list[Any]) -> None:
    fn = failing_at(3)
    node = dp.AsyncFetcher(dp.ThreadMapper(range(6), fn), async_tenfold, max_concurrency=3, on_error="skip")
    close_after.append(node)
    # Not skipped: on_error only concerns the fetcher's own function.
    assert collect_outcomes(iter(node)) == [0, 10, 20, fn.raised[3], 40, 50]


def test_batcher_keeps_its_partial_batch_across_a_source_error() -> None:
    fn = failing_at(4)
    node = dp.Batcher(dp.ThreadMapper(range(8), fn), 3)
    assert collect_outcomes(iter(node)) == [[0, 1, 2], fn.raised[4], [3, 5, 6], [7]]


def test_collator_and_filter_errors_are_raised_with_a_note_and_iteration_goes_on() -> None:
    def collate(batch: list[int]) -> int:
        if 4 in batch:
            raise ValueError("bad batch")
        return sum(batch)

    it = iter(dp.Collator(dp.Batcher(range(8), 2), collate))
    assert next(it) == 1
    assert next(it) == 5
    with pytest.raises(ValueError) as info:
        next(it)
    assert "Collator" in info.value.__notes__[0] and "[4, 5]" in info.value.__notes__[0]
    assert next(it) == 13

    def predicate(x: int) -> bool:
        if x == 3:
            raise ValueError("bad item")
        return True

    it = iter(dp.Filter(range(5), predicate))
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError) as info:
        next(it)
    assert "Filter" in info.value.__notes__[0]
    assert list(it) == [4]


def test_thread_mapper_timeout_names_the_item_and_iteration_goes_on() -> None:
    gate = threading.Event()

    def fn(x: int) -> int:
        if x == 1:
            gate.wait()
        return x

    # 1 s, not less: the timeout bounds every next(), item 0's (and the threads' start) too, and
    # two CPU hogs on 2 cores stretched that past 50 ms (3.13t stress runs). No speed claim.
    it = iter(dp.ThreadMapper(range(4), fn, num_threads=2, timeout=1.0))
    assert next(it) == 0
    with pytest.raises(TimeoutError, match="#1"):
        next(it)
    gate.set()
    assert list(it) == [1, 2, 3]


def test_async_fetcher_timeout_names_the_item_and_iteration_goes_on(close_after: list[Any]) -> None:
    gate = threading.Event()

    async def fn(x: int) -> int:
        import asyncio

        while x == 1 and not gate.is_set():
            await asyncio.sleep(0.005)
        return x

    node = dp.AsyncFetcher(range(4), fn, max_concurrency=2, timeout=1.0)  # 1 s: as above
    close_after.append(node)
    it = iter(node)
    assert next(it) == 0
    with pytest.raises(TimeoutError, match="#1"):
        next(it)
    gate.set()
    assert list(it) == [1, 2, 3]
