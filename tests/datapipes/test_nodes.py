"""Every node: an IterableDataset that works standalone, inside DataLoader and chained, and
keeps its configuration apart from the run state of each epoch."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate

import datapipes as dp
from tests.fixtures.pipes import async_identity, close_graph
from tests.fixtures.values import plain


def double(x: int) -> int:
    return 2 * x


async def async_double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


def is_even(x: int) -> bool:
    return x % 2 == 0


#: One factory per node: (node builder, the items one epoch yields).
NODES: dict[str, tuple[Callable[[], dp.Node[Any]], list[Any]]] = {
    "Sampler": (lambda: dp.Sampler(6), [0, 1, 2, 3, 4, 5]),
    "IterableWrapper": (lambda: dp.IterableWrapper([3, 1, 2]), [3, 1, 2]),
    "Batcher": (lambda: dp.Batcher(range(5), 2), [[0, 1], [2, 3], [4]]),
    "Unbatcher": (lambda: dp.Unbatcher([[0, 1], [], [2]]), [0, 1, 2]),
    "ThreadMapper": (lambda: dp.ThreadMapper(range(6), double, num_threads=3), [0, 2, 4, 6, 8, 10]),
    "AsyncFetcher": (lambda: dp.AsyncFetcher(range(6), async_double, max_concurrency=3), [0, 2, 4, 6, 8, 10]),
    "Reorderer": (lambda: dp.Reorderer([(1, "b"), (0, "a"), (2, "c")], window=2), [(0, "a"), (1, "b"), (2, "c")]),
    "Collator": (lambda: dp.Collator([[1, 2], [3, 4]]), [torch.tensor([1, 2]), torch.tensor([3, 4])]),
    "Prefetcher": (lambda: dp.Prefetcher(range(5), depth=2), [0, 1, 2, 3, 4]),
    "Shuffler": (lambda: dp.Shuffler(range(5), buffer_size=1, seed=0), [0, 1, 2, 3, 4]),
    "Filter": (lambda: dp.Filter(range(7), is_even), [0, 2, 4, 6]),
    "Header": (lambda: dp.Header(range(100), 3), [0, 1, 2]),
    "Mapper": (lambda: dp.Mapper(range(4), double), [0, 2, 4, 6]),
    "ReadyBatcher": (
        lambda: dp.ReadyBatcher(dp.ThreadMapper(range(5), double, in_order=False), 2),  # one thread: in order
        [[0, 2], [4, 6], [8]],
    ),
    "Mux": (lambda: dp.Mux([range(3), range(10, 12), range(20, 24)]), [0, 10, 20, 1, 11, 21, 2, 22, 23]),
    # costs 3, 4, 3, 9, 1: within 7 a batch takes samples until the next would pass it; 9 is alone
    "CostBatcher": (lambda: dp.CostBatcher([3, 4, 3, 9, 1], 7, int), [[3, 4], [3], [9], [1]]),
}


@pytest.fixture(params=sorted(NODES))
def node_case(request: pytest.FixtureRequest) -> Iterator[tuple[dp.Node[Any], list[Any]]]:
    make, expected = NODES[request.param]
    node = make()
    yield node, expected
    close_graph(node)


def test_every_exported_node_class_has_a_case() -> None:
    node_classes = {
        name for name in dp.__all__ if isinstance(getattr(dp, name), type) and issubclass(getattr(dp, name), dp.Node)
    }
    assert node_classes - {"Node"} == set(NODES)


def test_node_is_an_iterable_dataset(node_case: tuple[dp.Node[Any], list[Any]]) -> None:
    node, _ = node_case
    assert isinstance(node, IterableDataset)
    assert isinstance(node, dp.Node)


def test_node_works_standalone(node_case: tuple[dp.Node[Any], list[Any]]) -> None:
    node, expected = node_case
    assert plain([x for x in node]) == plain(expected)


def test_node_works_inside_a_dataloader(node_case: tuple[dp.Node[Any], list[Any]]) -> None:
    node, expected = node_case
    loader = DataLoader(node, batch_size=None, num_workers=0)
    assert plain(list(loader)) == plain(expected)
    assert plain(list(loader)) == plain(expected)  # a second epoch through the loader


def test_each_iter_is_a_fresh_iterator_and_a_new_epoch(node_case: tuple[dp.Node[Any], list[Any]]) -> None:
    node, expected = node_case
    first = iter(node)
    second = iter(node)
    assert first is not second
    assert isinstance(first, dp.NodeIterator)
    # The two epochs run independently of each other, interleaved.
    a, b = [], []
    for x, y in itertools.zip_longest(first, second):
        a.append(x)
        b.append(y)
    assert plain(a) == plain(b) == plain(expected)
    # And exhausted iterators stay exhausted; the node starts a new epoch.
    assert list(first) == []
    assert plain(list(node)) == plain(expected)


def test_iterator_close_is_idempotent_and_ends_the_epoch(node_case: tuple[dp.Node[Any], list[Any]]) -> None:
    node, _ = node_case
    it = iter(node)
    next(it)
    it.close()
    it.close()
    assert list(it) == []


def test_chained_graph_equals_nested_constructors() -> None:
    ds = list(range(100))

    def square(batch: list[int]) -> list[int]:
        return [i * i for i in batch]

    chained = dp.Sampler(ds).batch(32).map(square, num_threads=4).collate()
    nested = dp.Collator(dp.ThreadMapper(dp.Batcher(dp.Sampler(ds), 32), square, num_threads=4))
    assert type(chained) is type(nested) is dp.Collator
    assert type(chained.source) is dp.ThreadMapper
    assert type(chained.source.source) is dp.Batcher
    assert type(chained.source.source.source) is dp.Sampler
    got, want = list(chained), list(nested)
    assert len(got) == 4
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    assert torch.equal(torch.cat(got), torch.tensor([i * i for i in ds]))


def test_every_chaining_method_builds_its_node() -> None:
    src = dp.IterableWrapper(range(10))
    cases: list[tuple[dp.Node[Any], type, list[Any]]] = [
        (src.batch(4, drop_last=True), dp.Batcher, [[0, 1, 2, 3], [4, 5, 6, 7]]),
        (src.batch(4).unbatch(), dp.Unbatcher, list(range(10))),
        (src.map(double, num_threads=2, max_pending=1), dp.ThreadMapper, [2 * i for i in range(10)]),
        (src.async_map(async_identity, max_concurrency=3), dp.AsyncFetcher, list(range(10))),
        (src.batch(5).collate(sum), dp.Collator, [10, 35]),
        (src.prefetch(3), dp.Prefetcher, list(range(10))),
        (src.shuffle(1, seed=3), dp.Shuffler, list(range(10))),
        (src.filter(is_even), dp.Filter, [0, 2, 4, 6, 8]),
        (src.header(2), dp.Header, [0, 1]),
    ]
    for node, cls, expected in cases:
        assert type(node) is cls
        assert node.source is src or node.source.source is src  # type: ignore[union-attr]
        assert list(node) == expected
        close_graph(node)


def test_plain_iterables_are_wrapped() -> None:
    node = dp.ThreadMapper([1, 2, 3], double)
    assert isinstance(node.source, dp.IterableWrapper)
    assert dp.as_node(node) is node
    assert isinstance(dp.as_node(range(3)), dp.IterableWrapper)
    with pytest.raises(TypeError, match="source"):
        dp.as_node(42)  # type: ignore[arg-type]


def test_configuration_is_not_changed_by_running() -> None:
    node = dp.ThreadMapper(range(10), double, num_threads=3, max_pending=2, in_order=False, on_error="skip")
    list(node)
    assert (node.num_threads, node.max_pending, node.in_order, node.on_error) == (3, 2, False, "skip")


# -- per-node behaviour -------------------------------------------------------------------


def test_batcher_drop_last_and_partial_batches() -> None:
    assert list(dp.Batcher(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(dp.Batcher(range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert list(dp.Batcher(range(6), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert list(dp.Batcher([], 3)) == []


def test_unbatcher_inverts_batcher_and_accepts_tensors() -> None:
    assert list(dp.Unbatcher(dp.Batcher(range(7), 3))) == list(range(7))
    flat = list(dp.Unbatcher([torch.arange(3), torch.arange(3, 5)]))
    assert [int(t) for t in flat] == [0, 1, 2, 3, 4]


def test_collator_uses_default_collate_by_default() -> None:
    batches = [
        [{"x": torch.tensor([i, i]), "y": i, "name": f"n{i}"} for i in range(3)],
        [(torch.ones(2), 1.5), (torch.zeros(2), 2.5)],
    ]
    for got, batch in zip(dp.Collator(batches), batches, strict=True):
        want = default_collate(batch)
        if isinstance(want, dict):
            assert want.keys() == got.keys()
            assert torch.equal(got["x"], want["x"]) and torch.equal(got["y"], want["y"])
            assert got["name"] == want["name"]
        else:
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_collator_accepts_any_callable() -> None:
    assert list(dp.Collator([[1, 2], [3]], fn=sum)) == [3, 3]
    assert list(dp.Collator([[1, 2], [3]], fn=tuple)) == [(1, 2), (3,)]


def test_filter_keeps_items_where_predicate_is_true() -> None:
    assert list(dp.Filter(range(10), lambda x: x % 3 == 0)) == [0, 3, 6, 9]


def test_header_stops_without_pulling_more() -> None:
    pulled: list[int] = []

    def source() -> Iterator[int]:
        for i in range(100):
            pulled.append(i)
            yield i

    class Gen:
        def __iter__(self) -> Iterator[int]:
            return source()

    assert list(dp.Header(Gen(), 3)) == [0, 1, 2]
    assert pulled == [0, 1, 2]
    assert list(dp.Header(range(2), 5)) == [0, 1]
    assert list(dp.Header(range(2), 0)) == []


def test_shuffler_yields_a_seeded_permutation_epoch_after_epoch() -> None:
    a = dp.Shuffler(range(50), buffer_size=10, seed=7)
    b = dp.Shuffler(range(50), buffer_size=10, seed=7)
    a1, a2 = list(a), list(a)
    assert sorted(a1) == sorted(a2) == list(range(50))
    assert a1 != list(range(50))
    assert a1 != a2  # every epoch draws a new order ...
    assert [a1, a2] == [list(b), list(b)]  # ... the same ones for the same seed


def test_shuffler_is_bounded_by_its_buffer() -> None:
    # With a buffer of k, item i can only come out once item i - k + 1 has been pulled,
    # so no item is yielded more than k - 1 places before its source position.
    k = 4
    out = list(dp.Shuffler(range(200), buffer_size=k, seed=1))
    assert sorted(out) == list(range(200))
    assert all(pos >= item - (k - 1) for pos, item in enumerate(out))


def test_reorderer_restores_key_order_within_its_window() -> None:
    items = [(2, "c"), (0, "a"), (1, "b"), (4, "e"), (3, "d")]
    assert list(dp.Reorderer(items, window=3)) == sorted(items)
    assert list(dp.Reorderer([("x", 1), ("y", 0)], window=2, key=itemgetter(1))) == [("y", 0), ("x", 1)]
    assert list(dp.Reorderer([(6, "b"), (5, "a")], window=2, start=5)) == [(5, "a"), (6, "b")]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([(3, "d"), (0, "a")], "beyond window"),
        ([(0, "a"), (0, "a")], "twice"),
        ([(1, "b")], "missing"),
    ],
)
def test_reorderer_refuses_what_it_cannot_order(items: list[tuple[int, str]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        list(dp.Reorderer(items, window=2))


def test_prefetcher_yields_source_order() -> None:
    assert list(dp.Prefetcher(dp.ThreadMapper(range(30), double, num_threads=4), depth=3)) == [2 * i for i in range(30)]


def test_pin_memory_copies_containers_as_they_are() -> None:
    # Pinning needs an accelerator; without one, pin_memory returns non-tensors as they are.
    data = {"a": [1, "s", (2.0, b"b")], "b": None}
    assert dp.pin_memory(data) == data
