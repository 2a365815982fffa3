"""Invalid arguments are refused when the node is built, with an error naming the argument.
Bounds are explicit positive numbers: no "0 means unlimited"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import datapipes as dp
from tests.fixtures.pipes import async_identity, identity

_pools: list[dp.ThreadPool] = []


def case(
    exc_type: type[Exception], argument: str, make: Callable[..., object], *args: Any, label: str = "", **kwargs: Any
) -> Any:
    """One invalid call: ``make(*args, **kwargs)`` must raise ``exc_type`` naming ``argument``."""
    label = label or ", ".join([make.__name__] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return pytest.param(exc_type, argument, make, args, kwargs, id=label)


def pool_of(n: int) -> dp.ThreadPool:
    pool = dp.ThreadPool(n)
    _pools.append(pool)
    return pool


CASES = [
    # ThreadMapper
    case(ValueError, "num_threads", dp.ThreadMapper, [], identity, num_threads=0),
    case(ValueError, "num_threads", dp.ThreadMapper, [], identity, num_threads=-2),
    case(TypeError, "num_threads", dp.ThreadMapper, [], identity, num_threads=2.0),
    case(TypeError, "num_threads", dp.ThreadMapper, [], identity, num_threads=True),
    case(ValueError, "max_pending", dp.ThreadMapper, [], identity, max_pending=-1),
    case(TypeError, "max_pending", dp.ThreadMapper, [], identity, max_pending="1"),
    case(ValueError, "on_error", dp.ThreadMapper, [], identity, on_error="bogus"),
    case(TypeError, "fn", dp.ThreadMapper, [], fn=42),
    case(ValueError, "timeout", dp.ThreadMapper, [], identity, timeout=-1),
    case(ValueError, "timeout", dp.ThreadMapper, [], identity, timeout=0),
    case(TypeError, "source", dp.ThreadMapper, 42, identity, label="ThreadMapper, source=42"),
    case(
        ValueError,
        "pool",
        lambda: dp.ThreadMapper([], identity, num_threads=2, pool=pool_of(1)),
        label="pool too small",
    ),
    # AsyncFetcher
    case(ValueError, "max_concurrency", dp.AsyncFetcher, [], async_identity, max_concurrency=0),
    case(TypeError, "max_concurrency", dp.AsyncFetcher, [], async_identity, max_concurrency=None),
    case(ValueError, "on_error", dp.AsyncFetcher, [], async_identity, on_error="ignore"),
    case(TypeError, "fn", dp.AsyncFetcher, [], fn="afn"),
    case(ValueError, "timeout", dp.AsyncFetcher, [], async_identity, timeout=-1),
    # Prefetcher
    case(ValueError, "depth", dp.Prefetcher, [], depth=0),
    case(ValueError, "depth", dp.Prefetcher, [], depth=-1),
    # Batcher, Shuffler, Header, Reorderer, Collator, Filter, ThreadPool
    case(ValueError, "batch_size", dp.Batcher, [], batch_size=0),
    case(TypeError, "batch_size", dp.Batcher, [], batch_size="4"),
    case(ValueError, "buffer_size", dp.Shuffler, [], buffer_size=0),
    case(ValueError, "limit", dp.Header, [], limit=-1),
    case(ValueError, "window", dp.Reorderer, [], window=0),
    case(TypeError, "fn", dp.Collator, [], fn=3),
    case(TypeError, "predicate", dp.Filter, [], predicate=None),
    case(ValueError, "num_threads", dp.ThreadPool, num_threads=0),
]


@pytest.fixture(autouse=True)
def close_pools() -> Any:
    yield
    while _pools:
        _pools.pop().close()


@pytest.mark.parametrize(("exc_type", "argument", "make", "args", "kwargs"), CASES)
def test_invalid_argument_is_refused_naming_it(
    exc_type: type[Exception], argument: str, make: Callable[..., object], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(exc_type, match=argument):
        make(*args, **kwargs)


def test_chaining_methods_validate_too() -> None:
    src = dp.IterableWrapper(range(3))
    with pytest.raises(ValueError, match="num_threads"):
        src.map(identity, num_threads=0)
    with pytest.raises(ValueError, match="max_concurrency"):
        src.async_map(async_identity, max_concurrency=0)
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
        dp.ThreadMapper(range(3), identity, num_threads=0)
    with pytest.raises(ValueError):
        dp.AsyncFetcher(range(3), async_identity, max_concurrency=0)


def test_max_pending_zero_is_a_real_bound_not_unlimited() -> None:
    node = dp.ThreadMapper(range(50), identity, num_threads=2, max_pending=0)
    assert list(node) == list(range(50))
    assert node.stats()["peak_buffered"] <= 2  # num_threads + max_pending
