"""State: a graph restored mid-epoch yields exactly the items that were left, in the same
order, seeded shuffles included.

The oracle: run a full epoch of graph A; in a fresh identical graph B take k items and
save ``state_dict()`` (through pickle, as a checkpoint would); load it into a fresh graph C.
Then ``B[:k] + list(C) == A``."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import pickle
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datapipes as dp
from tests.fixtures.pipes import async_tenfold, close_graph, collect_outcomes
from tests.fixtures.values import hashable, plain

# -- graphs as data: a recipe that builds identical graphs again and again --------------------


def bump(x: Any) -> Any:
    """Deterministic, thread-safe, and defined on every kind of item in these graphs."""
    if isinstance(x, list):
        return [bump(e) for e in x]
    return x * 2 + 1


async def async_bump(x: Any) -> Any:
    await asyncio.sleep(0)
    return bump(x)


def key(x: Any) -> int:
    flat = plain(x)
    while isinstance(flat, list):
        flat = [x for e in flat for x in (e if isinstance(e, list) else [e])]
        flat = sum(flat) if all(isinstance(e, int) for e in flat) else flat
    return int(flat)


def keep(x: Any) -> bool:
    return key(x) % 3 != 1


@dataclasses.dataclass(frozen=True)
class Recipe:
    n: int
    source: str  # "wrapper", "sampler", "shuffled_sampler"
    seed: int
    ops: tuple[tuple[Any, ...], ...]

    def build(self) -> dp.Node[Any]:
        node: dp.Node[Any]
        if self.source == "wrapper":
            node = dp.IterableWrapper(list(range(self.n)))
        elif self.source == "sampler":
            node = dp.Sampler(self.n)
        else:
            node = dp.Sampler(self.n, shuffle=True, seed=self.seed)
        for op, *args in self.ops:
            if op == "shuffle":
                node = node.shuffle(args[0], seed=args[1])
            elif op == "map":
                node = node.map(bump, num_threads=args[0], max_pending=args[1])
            elif op == "async_map":
                node = node.async_map(async_bump, max_concurrency=args[0])
            elif op == "batch":
                node = node.batch(args[0], drop_last=args[1])
            elif op == "unbatch":
                node = node.unbatch()
            elif op == "filter":
                node = node.filter(keep)
            elif op == "header":
                node = node.header(args[0])
            elif op == "prefetch":
                node = node.prefetch(args[0])
            elif op == "collate":
                node = node.collate()
            else:  # pragma: no cover
                raise AssertionError(op)
        return node


@st.composite
def recipes(draw: st.DrawFn, max_ops: int = 5) -> Recipe:
    n = draw(st.integers(0, 40))
    source = draw(st.sampled_from(["wrapper", "sampler", "shuffled_sampler"]))
    if source == "shuffled_sampler":
        n = max(n, 1)  # RandomSampler refuses an empty dataset
    seed = draw(st.integers(0, 2**16))
    # The containers around each scalar: batch pushes "list", collate turns a list of
    # scalars into a "tensor", unbatch pops.
    containers: list[str] = []
    ops: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(0, max_ops))):
        choices = ["shuffle", "map", "async_map", "batch", "filter", "header", "prefetch"]
        if containers:
            choices.append("unbatch")
        if containers == ["list"]:
            choices.append("collate")
        op = draw(st.sampled_from(choices))
        if op == "shuffle":
            ops.append((op, draw(st.integers(1, 8)), draw(st.integers(0, 99))))
        elif op == "map":
            ops.append((op, draw(st.integers(1, 4)), draw(st.integers(0, 3))))
        elif op == "async_map":
            ops.append((op, draw(st.integers(1, 4))))
        elif op == "batch":
            ops.append((op, draw(st.integers(1, 5)), draw(st.booleans())))
            containers.append("list")
        elif op == "unbatch":
            ops.append((op,))
            containers.pop()
        elif op == "collate":
            ops.append((op,))
            containers[-1] = "tensor"
        elif op == "header":
            ops.append((op, draw(st.integers(0, 30))))
        elif op == "prefetch":
            ops.append((op, draw(st.integers(1, 3))))
        else:  # filter
            ops.append((op,))
    return Recipe(n, source, seed, tuple(ops))


def run_epoch(node: dp.Node[Any]) -> list[Any]:
    return plain(list(node))


def check_cut_and_resume(recipe: Recipe, k: int, more: int, epoch: int = 0) -> None:
    """Cut epoch number ``epoch`` (0 = the first) after ``k`` items."""
    a = recipe.build()
    b = recipe.build()
    c = recipe.build()
    try:
        for _ in range(epoch):  # earlier epochs move the seeded generators on
            run_epoch(a)
            run_epoch(b)
        full = run_epoch(a)
        k = min(k, len(full))
        it = iter(b)
        head = plain([next(it) for _ in range(k)])
        saved = pickle.dumps(b.state_dict())
        # B goes on after the checkpoint: the saved state must not change with it.
        for _ in range(more):
            if next(it, None) is None:
                break
        it.close()
        c.load_state_dict(pickle.loads(saved))
        rest = run_epoch(c)
        assert head == full[:k]
        assert head + rest == full, (recipe, k)
    finally:
        for g in (a, b, c):
            close_graph(g)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recipe=recipes(), k=st.integers(0, 60), more=st.integers(0, 3), epoch=st.integers(0, 1))
def test_a_restored_graph_yields_exactly_the_items_that_were_left(
    recipe: Recipe, k: int, more: int, epoch: int
) -> None:
    check_cut_and_resume(recipe, k, more, epoch)


@pytest.mark.parametrize(
    "ops",
    [
        (("map", 4, 0), ("batch", 3, False), ("map", 2, 1), ("unbatch",)),
        (("shuffle", 5, 1), ("prefetch", 2), ("batch", 4, True), ("collate",), ("unbatch",)),
        (("async_map", 3), ("filter",), ("header", 17), ("map", 3, 2)),
        (("batch", 4, False), ("async_map", 2), ("shuffle", 3, 9), ("prefetch", 1), ("unbatch",)),
    ],
)
@pytest.mark.parametrize("source", ["wrapper", "sampler", "shuffled_sampler"])
def test_every_cut_point_of_some_deep_graphs(ops: tuple[tuple[Any, ...], ...], source: str) -> None:
    recipe = Recipe(23, source, 5, ops)
    for k in range(0, 24, 3):
        check_cut_and_resume(recipe, k, more=1, epoch=k % 2)


def test_state_before_the_first_item_and_after_the_last() -> None:
    recipe = Recipe(10, "shuffled_sampler", 3, (("map", 2, 1), ("batch", 3, False)))
    full = run_epoch(recipe.build())
    b = recipe.build()
    assert b.state_dict() == {}  # no iterator yet: a fresh epoch
    c = recipe.build()
    c.load_state_dict(b.state_dict())
    assert run_epoch(c) == full
    it = iter(b)
    for _ in full:
        next(it)
    end = b.state_dict()
    c = recipe.build()
    c.load_state_dict(end)
    assert list(c) == []
    it.close()


@pytest.mark.parametrize("ops", [(), (("map", 2, 1),), (("shuffle", 4, 2),), (("async_map", 2), ("batch", 3, False))])
def test_state_taken_before_the_first_item_of_a_later_epoch(ops: tuple[tuple[Any, ...], ...]) -> None:
    # Nothing drawn yet in this epoch, but the generator is an epoch ahead of a fresh one.
    check_cut_and_resume(Recipe(12, "shuffled_sampler", 6, ops), k=0, more=0, epoch=1)


def test_load_state_dict_applies_to_the_next_epoch_only() -> None:
    node = dp.Sampler(6).map(bump, num_threads=2)
    it = iter(node)
    next(it), next(it)
    state = node.state_dict()
    it.close()
    node.load_state_dict(state)
    assert list(node) == [bump(i) for i in range(2, 6)]
    assert list(node) == [bump(i) for i in range(6)]  # the epoch after starts afresh


def test_load_state_dict_refuses_what_is_not_a_state() -> None:
    with pytest.raises(TypeError, match="state_dict"):
        dp.Sampler(3).load_state_dict([1, 2])  # type: ignore[arg-type]


#: One graph per node, each yielding a few items.
EVERY_NODE: dict[str, Callable[[], dp.Node[Any]]] = {
    "Sampler": lambda: dp.Sampler(7, shuffle=True, seed=3),
    "IterableWrapper": lambda: dp.IterableWrapper(["a", "b", "c", "d"]),
    "Batcher": lambda: dp.Batcher(range(8), 3),
    "Unbatcher": lambda: dp.Unbatcher([[0, 1], [], [2, 3, 4], [5]]),
    "ThreadMapper": lambda: dp.ThreadMapper(range(9), bump, num_threads=3, max_pending=2),
    "AsyncFetcher": lambda: dp.AsyncFetcher(range(9), async_tenfold, max_concurrency=3),
    "Reorderer": lambda: dp.Reorderer([(1, "b"), (0, "a"), (3, "d"), (2, "c"), (4, "e")], window=3),
    "Collator": lambda: dp.Collator(dp.Batcher(range(7), 2)),
    "Prefetcher": lambda: dp.Prefetcher(range(6), depth=2),
    "Shuffler": lambda: dp.Shuffler(range(12), buffer_size=4, seed=8),
    "Filter": lambda: dp.Filter(range(12), keep),
    "Header": lambda: dp.Header(range(100), 5),
    "Mapper": lambda: dp.Mapper(dp.Sampler(7, shuffle=True, seed=3), bump),  # map() over the sampler itself
    "Mux": lambda: dp.Mux([dp.Prefetcher(range(4)), range(10, 12), dp.ThreadMapper(range(20, 25), bump)]),
    "ReadyBatcher": lambda: dp.ReadyBatcher(dp.ThreadMapper(range(9), bump, in_order=False), 2),  # one thread
    "CostBatcher": lambda: dp.CostBatcher(range(12), 7, lambda x: x % 5, batch_size=3, group_window=4),
}


def test_every_node_has_a_resume_case() -> None:
    nodes = {n for n in dp.__all__ if isinstance(getattr(dp, n), type) and issubclass(getattr(dp, n), dp.Node)}
    assert nodes - {"Node"} == set(EVERY_NODE)


@pytest.mark.parametrize("name", sorted(EVERY_NODE))
def test_every_node_resumes_at_every_cut(name: str) -> None:
    make = EVERY_NODE[name]
    first = make()
    full = run_epoch(first)
    close_graph(first)
    for k in range(len(full) + 1):
        b, c = make(), make()
        it = iter(b)
        head = plain([next(it) for _ in range(k)])
        c.load_state_dict(pickle.loads(pickle.dumps(b.state_dict())))
        it.close()
        assert head + run_epoch(c) == full, k
        close_graph(b)
        close_graph(c)


# -- seeded shuffles: the epochs after a restored one draw the same orders too -------------


@pytest.mark.parametrize("epoch", [0, 1])
def test_seeded_sampler_resumes_mid_epoch_and_later_epochs_match(epoch: int) -> None:
    a = dp.Sampler(30, shuffle=True, seed=11)
    epochs = [list(a) for _ in range(4)]
    b = dp.Sampler(30, shuffle=True, seed=11)
    for _ in range(epoch):
        list(b)
    it = iter(b)
    head = [next(it) for _ in range(12)]
    state = pickle.loads(pickle.dumps(b.state_dict()))
    c = dp.Sampler(30, shuffle=True, seed=11)  # a fresh one: its generator is at epoch 0
    c.load_state_dict(state)
    assert head + list(c) == epochs[epoch]
    assert [list(c), list(c)] == epochs[epoch + 1 : epoch + 3]


def test_seeded_shuffler_resumes_mid_epoch_and_later_epochs_match() -> None:
    def make() -> dp.Node[Any]:
        return dp.Shuffler(range(40), buffer_size=7, seed=4)

    a = make()
    epochs = [list(a) for _ in range(3)]
    assert epochs[0] != epochs[1]
    b = make()
    list(b)  # one full epoch first: the checkpoint is in the second
    it = iter(b)
    head = [next(it) for _ in range(9)]
    state = pickle.loads(pickle.dumps(b.state_dict()))
    c = make()
    c.load_state_dict(state)
    assert head + list(c) == epochs[1]
    assert list(c) == epochs[2]


def test_distributed_sampler_resumes_in_its_epoch() -> None:
    a = dp.Sampler(25, rank=1, world_size=3, shuffle=True, seed=2)
    a.set_epoch(4)
    full = list(a)
    b = dp.Sampler(25, rank=1, world_size=3, shuffle=True, seed=2)
    b.set_epoch(4)
    it = iter(b)
    head = [next(it) for _ in range(3)]
    c = dp.Sampler(25, rank=1, world_size=3, shuffle=True, seed=2)  # still at epoch 0
    c.load_state_dict(b.state_dict())
    assert head + list(c) == full


def test_sampler_over_a_sampler_with_a_generator_resumes() -> None:
    def make() -> dp.Node[Any]:
        gen = torch.Generator().manual_seed(8)
        weights = torch.rand(20, generator=torch.Generator().manual_seed(1))
        sampler = torch.utils.data.WeightedRandomSampler(weights, num_samples=15, generator=gen)
        return dp.Sampler(sampler=torch.utils.data.BatchSampler(sampler, 4, drop_last=False))

    full = list(make())
    b = make()
    it = iter(b)
    head = [next(it) for _ in range(2)]
    c = make()
    c.load_state_dict(b.state_dict())
    assert head + list(c) == full


def test_sampler_without_a_generator_resumes_from_the_global_random_state() -> None:
    torch.manual_seed(0)
    full = list(dp.Sampler(sampler=torch.utils.data.RandomSampler(range(20))))
    torch.manual_seed(0)
    b = dp.Sampler(sampler=torch.utils.data.RandomSampler(range(20)))
    it = iter(b)
    head = [next(it) for _ in range(5)]
    state = b.state_dict()
    torch.manual_seed(123)  # whatever the global state is at resume time
    c = dp.Sampler(sampler=torch.utils.data.RandomSampler(range(20)))
    c.load_state_dict(state)
    assert head + list(c) == full


# -- out of order: the restored graph yields exactly the multiset that was left ------------


def out_of_order_graph(n: int, kind: str, gate: threading.Event | None = None) -> dp.Node[Any]:
    """Item 0 is slow (waits for ``gate``), so later items finish, and are yielded, first."""

    def fn(x: int) -> int:
        if x == 0 and gate is not None:
            gate.wait()
        return x * 10

    async def afn(x: int) -> int:
        while x == 0 and gate is not None and not gate.is_set():
            await asyncio.sleep(0.002)
        return x * 10

    if kind == "map":
        return dp.ThreadMapper(range(n), fn, num_threads=3, max_pending=2, in_order=False)
    return dp.AsyncFetcher(range(n), afn, max_concurrency=4, in_order=False)


@pytest.mark.parametrize("kind", ["map", "async_map"])
@pytest.mark.parametrize("k", [0, 1, 3, 5])
def test_out_of_order_restore_yields_the_multiset_that_was_left(kind: str, k: int) -> None:
    n = 20
    gate = threading.Event()
    b = out_of_order_graph(n, kind, gate)
    it = iter(b)
    head = [next(it) for _ in range(k)]  # item 0 is still held back: these finished past it
    assert 0 not in head
    state = pickle.loads(pickle.dumps(b.state_dict()))
    gate.set()
    it.close()
    close_graph(b)
    c = out_of_order_graph(n, kind)
    c.load_state_dict(state)
    rest = list(c)
    close_graph(c)
    assert Counter(head) + Counter(rest) == Counter(x * 10 for x in range(n))
    assert 0 in rest


@st.composite
def out_of_order_recipes(draw: st.DrawFn) -> tuple[int, bool, str, int, int]:
    return (
        draw(st.integers(1, 40)),  # RandomSampler refuses an empty dataset
        draw(st.booleans()),
        draw(st.sampled_from(["map", "async_map"])),
        draw(st.integers(1, 4)),
        draw(st.integers(0, 3)),
    )


def build_out_of_order(n: int, batched: bool, kind: str, width: int, pending: int) -> dp.Node[Any]:
    def fn(x: Any) -> Any:
        return x  # durations vary with thread scheduling; order varies with them

    async def afn(x: Any) -> Any:
        await asyncio.sleep(0.001 * (hash(str(x)) % 3))
        return x

    node: dp.Node[Any] = dp.Sampler(n, shuffle=True, seed=n)
    if batched:
        node = node.batch(3)
    if kind == "map":
        node = node.map(fn, num_threads=width, max_pending=pending, in_order=False)
    else:
        node = node.async_map(afn, max_concurrency=width, in_order=False)
    return node.prefetch(2)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recipe=out_of_order_recipes(), k=st.integers(0, 45))
def test_out_of_order_graphs_restore_to_the_multiset_that_was_left(
    recipe: tuple[int, bool, str, int, int], k: int
) -> None:
    a, b, c = (build_out_of_order(*recipe) for _ in range(3))
    try:
        full = Counter(hashable(x) for x in a)
        it = iter(b)
        head = []
        for _ in range(k):
            x = next(it, None)
            if x is None:
                break
            head.append(hashable(x))
        state = pickle.loads(pickle.dumps(b.state_dict()))
        it.close()
        c.load_state_dict(state)
        assert Counter(head) + Counter(hashable(x) for x in c) == full
    finally:
        for g in (a, b, c):
            close_graph(g)


def test_a_mux_resumed_after_a_source_ended_draws_the_later_epochs_as_uninterrupted() -> None:
    """torch's RandomSampler draws once more when its iterator ends: a source the state says
    ended is run to its end again, or the later epochs are one draw behind."""

    def make() -> dp.Mux[int]:
        return dp.Mux([dp.Sampler(3, shuffle=True, seed=1), dp.IterableWrapper(range(100, 110))])

    uninterrupted = make()
    want = [list(uninterrupted) for _ in range(3)]
    for k in range(len(want[0]) + 1):
        with make().open() as it:
            got = [next(it) for _ in range(k)]
            state = pickle.loads(pickle.dumps(it.state_dict()))
        resumed = make()
        resumed.load_state_dict(state)
        epochs = [list(resumed) for _ in range(3)]
        assert [got + epochs[0], *epochs[1:]] == want, k


def test_a_mux_source_that_raised_at_its_end_resumes() -> None:
    class RaisesAtEnd:
        def __iter__(self) -> Any:
            yield from range(3)
            raise ValueError("source 0 fails at its end")

    def make() -> dp.Mux[int]:
        return dp.Mux([dp.IterableWrapper(RaisesAtEnd()), dp.IterableWrapper(range(100, 110))])

    def run(it: Any) -> list[Any]:
        return [repr(v) if isinstance(v, Exception) else v for v in collect_outcomes(it)]

    want = run(make().open())
    it = make().open()
    got = [next(it) for _ in range(6)]
    with pytest.raises(ValueError) as raised:
        next(it)
    got += [repr(raised.value)] + [next(it) for _ in range(2)]
    state = pickle.loads(pickle.dumps(it.state_dict()))
    assert state["active"][0] is False  # source 0 ended
    resumed = make()
    resumed.load_state_dict(state)
    assert got + run(resumed.open()) == want


@pytest.mark.parametrize("how", ["dropped", "closed"])
def test_an_epoch_dropped_or_closed_mid_way_leaves_its_state_on_the_node(how: str) -> None:
    def pipeline() -> dp.Node[int]:
        return dp.Sampler(100).map(lambda x: x * 2, num_threads=2)

    node = pipeline()
    if how == "dropped":  # zip() holds the epoch's iterator; dropping zip drops it
        got = [x for _, x in zip(range(10), node, strict=False)]
    else:
        it = iter(node)
        got = [next(it) for _ in range(10)]
        it.close()
        del it
    gc.collect()
    resumed = pipeline()
    resumed.load_state_dict(node.state_dict())
    assert got + list(resumed) == [2 * i for i in range(100)]
    assert list(node)[:1] == [0]  # a new iter() of the node starts a fresh epoch


@settings(max_examples=200, deadline=None)
@given(st.permutations(range(12)), st.integers(0, 12))
def test_the_record_of_positions_finished_is_the_set_added_in_any_order(order: list[int], n: int) -> None:
    """``Frontier``: the one record of positions finished, by a node's state and the loader's ledgers."""
    from datapipes._progress import Frontier, encode_ranges

    finished = Frontier()
    for position in order[:n]:
        finished.add(position)
    added = set(order[:n])
    expected_frontier = min(set(range(13)) - added)
    assert finished.frontier == expected_frontier
    assert finished.above == {p for p in added if p > expected_frontier}
    again = Frontier.from_ranges(finished.frontier, finished.ranges())
    assert (again.frontier, again.above) == (finished.frontier, finished.above)
    ranges = encode_ranges(added)
    assert {p for a, b in ranges for p in range(a, b)} == added
    assert all(prev[1] < nxt[0] for prev, nxt in itertools.pairwise(ranges))  # sorted, each run whole
