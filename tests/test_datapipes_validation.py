"""Invalid arguments are refused when the node is built, with an error naming the argument.
Bounds are explicit positive numbers: no "0 means unlimited"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import datapipes as dp


async def afn(x: Any) -> Any:
    return x


def fn(x: Any) -> Any:
    return x


CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    # ThreadMapper
    ("num_threads=0", lambda: dp.ThreadMapper([], fn, num_threads=0), ValueError, "num_threads"),
    ("num_threads=-2", lambda: dp.ThreadMapper([], fn, num_threads=-2), ValueError, "num_threads"),
    ("num_threads=2.0", lambda: dp.ThreadMapper([], fn, num_threads=2.0), TypeError, "num_threads"),  # type: ignore[arg-type]
    ("num_threads=True", lambda: dp.ThreadMapper([], fn, num_threads=True), TypeError, "num_threads"),
    ("max_pending=-1", lambda: dp.ThreadMapper([], fn, max_pending=-1), ValueError, "max_pending"),
    ("max_pending='1'", lambda: dp.ThreadMapper([], fn, max_pending="1"), TypeError, "max_pending"),  # type: ignore[arg-type]
    ("map on_error", lambda: dp.ThreadMapper([], fn, on_error="bogus"), ValueError, "on_error"),  # type: ignore[arg-type]
    ("map fn", lambda: dp.ThreadMapper([], 42), TypeError, "fn"),  # type: ignore[arg-type]
    ("map timeout=-1", lambda: dp.ThreadMapper([], fn, timeout=-1), ValueError, "timeout"),
    ("map timeout=0", lambda: dp.ThreadMapper([], fn, timeout=0), ValueError, "timeout"),
    ("map source", lambda: dp.ThreadMapper(42, fn), TypeError, "source"),  # type: ignore[arg-type]
    ("small pool", lambda: dp.ThreadMapper([], fn, num_threads=2, pool=_pool(1)), ValueError, "pool"),
    # AsyncFetcher
    ("max_concurrency=0", lambda: dp.AsyncFetcher([], afn, max_concurrency=0), ValueError, "max_concurrency"),
    ("max_concurrency=None", lambda: dp.AsyncFetcher([], afn, max_concurrency=None), TypeError, "max_concurrency"),  # type: ignore[arg-type]
    ("fetch on_error", lambda: dp.AsyncFetcher([], afn, on_error="ignore"), ValueError, "on_error"),  # type: ignore[arg-type]
    ("fetch fn", lambda: dp.AsyncFetcher([], "afn"), TypeError, "fn"),  # type: ignore[arg-type]
    ("fetch timeout=-1", lambda: dp.AsyncFetcher([], afn, timeout=-1), ValueError, "timeout"),
    # Prefetcher
    ("depth=0", lambda: dp.Prefetcher([], depth=0), ValueError, "depth"),
    ("depth=-1", lambda: dp.Prefetcher([], depth=-1), ValueError, "depth"),
    # Batcher, Shuffler, Header, Reorderer, Collator, Filter
    ("batch_size=0", lambda: dp.Batcher([], 0), ValueError, "batch_size"),
    ("batch_size='4'", lambda: dp.Batcher([], "4"), TypeError, "batch_size"),  # type: ignore[arg-type]
    ("buffer_size=0", lambda: dp.Shuffler([], 0), ValueError, "buffer_size"),
    ("limit=-1", lambda: dp.Header([], -1), ValueError, "limit"),
    ("window=0", lambda: dp.Reorderer([], 0), ValueError, "window"),
    ("collate fn", lambda: dp.Collator([], fn=3), TypeError, "fn"),  # type: ignore[arg-type]
    ("predicate", lambda: dp.Filter([], predicate=None), TypeError, "predicate"),  # type: ignore[arg-type]
    # ThreadPool, EventLoopThread's users
    ("pool num_threads=0", lambda: dp.ThreadPool(0), ValueError, "num_threads"),
]

_pools: list[dp.ThreadPool] = []


def _pool(n: int) -> dp.ThreadPool:
    pool = dp.ThreadPool(n)
    _pools.append(pool)
    return pool


@pytest.fixture(autouse=True)
def close_pools() -> Any:
    yield
    while _pools:
        _pools.pop().close()


@pytest.mark.parametrize(("label", "build", "exc_type", "argument"), CASES, ids=[c[0] for c in CASES])
def test_invalid_argument_is_refused_naming_it(
    label: str, build: Callable[[], object], exc_type: type[Exception], argument: str
) -> None:
    with pytest.raises(exc_type, match=argument):
        build()


def test_chaining_methods_validate_too() -> None:
    src = dp.IterableWrapper(range(3))
    with pytest.raises(ValueError, match="num_threads"):
        src.map(fn, num_threads=0)
    with pytest.raises(ValueError, match="max_concurrency"):
        src.async_map(afn, max_concurrency=0)
    with pytest.raises(ValueError, match="batch_size"):
        src.batch(0)
    with pytest.raises(ValueError, match="depth"):
        src.prefetch(0)
    with pytest.raises(ValueError, match="buffer_size"):
        src.shuffle(0)
    with pytest.raises(ValueError, match="limit"):
        src.header(-1)


def test_refused_nodes_start_no_thread() -> None:
    # Arguments are checked before anything starts (the leak fixture would catch a thread).
    with pytest.raises(ValueError):
        dp.ThreadMapper(range(3), fn, num_threads=0)
    with pytest.raises(ValueError):
        dp.AsyncFetcher(range(3), afn, max_concurrency=0)


def test_max_pending_zero_is_a_real_bound_not_unlimited() -> None:
    node = dp.ThreadMapper(range(50), fn, num_threads=2, max_pending=0)
    assert list(node) == list(range(50))
    assert node.stats()["peak_buffered"] <= 1
