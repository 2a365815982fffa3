"""Exact resume: ``ThreadLoader.state_dict()`` / ``load_state_dict()``.

The oracle: an uninterrupted run of two epochs (loader A). Loader B, built the same way, yields
``k`` batches of its first epoch, then its state goes through ``torch.save`` /
``torch.load(weights_only=True)`` into loader C (a fresh process would do the same), which may
have other ``num_workers`` / ``item_concurrency``. Then B's ``k`` batches plus C's first epoch
are A's first epoch (every sample once; in order when ``in_order=True``), and C's next epoch
is A's second. Items sleep for a random moment so that workers finish out of order.

Where it is defined for process mode, a test also runs with worker processes (``worker_processes``,
``PROCESSES``): both loaders in processes, or a state taken in one mode resumed in the other.
The datasets are in ``tests/fixtures/``, where a worker process imports them. Datapipes
graphs (refused in process mode) stay in process.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    Dataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

import datapipes as dp
from tests.fixtures.datasets import AsyncItems, Items, N, Shards, jitter
from tests.fixtures.processes import workers_in
from tests.fixtures.resume import (
    CountedBatches,
    EagerBatches,
    EagerSampler,
    EpochStream,
    Failing,
    FailingStream,
    GeneratorSampler,
    NoisyStream,
    OwnAndGlobal,
    Seeds,
    SharedCalls,
    SlowItems,
    StatefulShards,
    Versioned,
    WorkerSeeds,
)
from tests.fixtures.values import flat, through_torch_save
from torch_threadloader import ThreadLoader

pytestmark = pytest.mark.usefixtures("no_child_left")

BATCH = 4  # of N = 23 samples: the last batch is short
MODES = ["threads", "processes"]
#: Loader arguments in process mode: 2 processes of one thread (2 workers), of two (4), of the inline
#: default (num_workers=0: one thread each, 2 workers).
PROCESSES = {
    "P2x1": {"num_workers": 1, "worker_processes": 2},
    "P2x2": {"num_workers": 2, "worker_processes": 2},
    "P2x0": {"num_workers": 0, "worker_processes": 2},
}


def pair_id(pair: tuple[Any, Any]) -> str:
    """A test id for the workers (or concurrency) of loaders B and C: ``"P2x1-to-0"``."""
    return f"{pair[0]}-to-{pair[1]}"


def loader_workers(spec: int | str) -> dict[str, int]:
    """A loader's worker arguments: ``num_workers`` threads (an int), or a ``PROCESSES`` name."""
    return {"num_workers": spec} if isinstance(spec, int) else PROCESSES[spec]


def graph(in_order: bool, async_items: bool, concurrency: int, n: int = N) -> dp.Node[int]:
    def slow(i: int) -> int:
        time.sleep(jitter(i))
        return i

    async def aslow(i: int) -> int:
        await asyncio.sleep(jitter(i))
        return i

    source = dp.Sampler(n, shuffle=True, seed=5)
    if async_items:
        return source.async_map(aslow, max_concurrency=concurrency, in_order=in_order)
    return source.map(slow, num_threads=concurrency, in_order=in_order)


def take(loader: ThreadLoader[Any], k: int) -> tuple[list[Any], dict[str, Any]]:
    it = iter(loader)
    got = [next(it) for _ in range(k)]
    state = loader.state_dict()
    del it
    return got, through_torch_save(state)


def check_resume(
    make: Callable[[Any, int], ThreadLoader[Any]],
    k: int | str,
    *,
    workers: tuple[Any, Any],
    concurrency: tuple[int, int] = (1, 1),
    ordered: bool,
    sized: bool = True,
) -> None:
    a = make(workers[0], concurrency[0])
    epoch0, epoch1 = list(a), list(a)
    a.close()
    if isinstance(k, str):
        k = named_cut(k, len(epoch0))
    b = make(workers[0], concurrency[0])
    got, state = take(b, k)
    b.close()
    c = make(workers[1], concurrency[1])
    c.load_state_dict(state)
    if k == len(epoch0) and sized:  # a state taken after the last batch resumes at the next epoch
        rest, after = [], list(c)
    else:
        rest, after = list(c), list(c)
    c.close()
    done, want = flat(got + rest), flat(epoch0)
    assert sorted(done) == sorted(want), f"k={k}: resumed epoch {done} is not {want} (as a multiset)"
    if ordered:
        assert done == want
    assert sorted(flat(after)) == sorted(flat(epoch1))
    if ordered:
        assert flat(after) == flat(epoch1), "the epoch after the resumed one draws as the uninterrupted run's"


def cuts(batches: int) -> list[int]:
    return sorted({0, 1, batches // 2, batches - 1, batches})


CUTS = ["0", "1", "middle", "last-1", "last"]


def named_cut(name: str, batches: int) -> int:
    """A cut of :data:`CUTS` as the number of batches taken before the state, of ``batches``."""
    return {"0": 0, "1": 1, "middle": batches // 2, "last-1": batches - 1, "last": batches}[name]


BATCHES = -(-N // BATCH)
SAMPLERS: dict[str, Callable[[torch.Generator], dict[str, Any]]] = {
    "shuffle": lambda g: {"shuffle": True, "generator": g},
    "sequential": lambda g: {"sampler": SequentialSampler(range(N))},
    "weighted": lambda g: {
        "sampler": WeightedRandomSampler([1.0 + i % 3 for i in range(N)], N, generator=g),
        "generator": g,
    },
    "subset": lambda g: {"sampler": SubsetRandomSampler(list(range(N)), generator=g), "generator": g},
}


# The resume matrix in one test, as an all-pairs design: every pair of values of any two of its
# dimensions (kind, order, async items, num_workers, item_concurrency, cut) in at least one case,
# plus, for each kind, its most concurrent cell at every cut. Loader B is built with
# (num_workers, item_concurrency); loader C, which resumes B's state, with the next ones
# (RESUMED_WITH), so each case also checks a resume with other arguments where the state allows
# it (map-style datasets; an IterableDataset's state is per worker, a graph owns its concurrency).
# Not in it, because the loader refuses them: async items of an IterableDataset (its items come
# from its iterator) and item_concurrency > 1 for one (tests/loader/test_execution.py).
MATRIX_N, MATRIX_BATCH = 45, 8  # batches of 8 (item_concurrency 8 is reachable), a short last one
RESUMED_WITH = {0: 4, 1: 0, 4: 1}
MATRIX_KINDS = ["sampler", "batch_sampler", "iterable", "graph"]


MatrixCell = tuple[str, bool, bool, int, int, str]


def _matrix_cells() -> list[MatrixCell]:
    """Every cell the loader accepts (not async items or item_concurrency > 1 for an
    IterableDataset), in a fixed order."""
    return [
        cell
        for cell in itertools.product(MATRIX_KINDS, (True, False), (False, True), (0, 1, 4), (1, 8), CUTS)
        if not (cell[0] == "iterable" and (cell[2] or cell[4] > 1))
    ]


def _pairs(cell: MatrixCell) -> set[tuple[int, Any, int, Any]]:
    return {(i, cell[i], j, cell[j]) for i, j in itertools.combinations(range(len(cell)), 2)}


def all_pairs(cells: list[MatrixCell]) -> list[MatrixCell]:
    """A greedy all-pairs subset of ``cells``: each next cell covers the most pairs not yet
    covered (the first such in order), until every pair some cell has is covered."""
    uncovered = set().union(*(_pairs(c) for c in cells))
    chosen: list[MatrixCell] = []
    while uncovered:
        best = max(cells, key=lambda c: len(_pairs(c) & uncovered))
        chosen.append(best)
        uncovered -= _pairs(best)
    return chosen


def matrix_cases() -> list[Any]:
    cells = _matrix_cells()
    full = [c for c in cells if c[1:5] == (False, c[0] != "iterable", 4, 1 if c[0] == "iterable" else 8)]
    chosen = list(dict.fromkeys(all_pairs(cells) + full))
    cases = []
    for kind, in_order, async_items, nw, ic, cut in chosen:
        sync = "async" if async_items else "sync"
        order = "ordered" if in_order else "unordered"
        cases.append(
            pytest.param(kind, in_order, async_items, nw, ic, cut, id=f"{kind}-{order}-{sync}-nw{nw}-ic{ic}-{cut}")
        )
    return cases


def test_the_matrix_design_covers_every_pair_and_each_kinds_most_concurrent_cell_at_every_cut() -> None:
    cells = _matrix_cells()
    chosen = [tuple(p.values) for p in matrix_cases()]
    assert set().union(*(_pairs(c) for c in chosen)) == set().union(*(_pairs(c) for c in cells))
    for kind in MATRIX_KINDS:
        assert {c[5] for c in chosen if c[0] == kind and c[1] is False and c[3] == 4} == set(CUTS)
    assert len(chosen) < len(cells) // 4


@pytest.mark.parametrize(("kind", "in_order", "async_items", "nw", "ic", "cut"), matrix_cases())
def test_the_resume_matrix(
    kind: str, in_order: bool, async_items: bool, nw: int, ic: int, cut: str, close_after: list[Any]
) -> None:
    n = MATRIX_N

    def make(workers: int, concurrency: int) -> ThreadLoader[Any]:
        g = torch.Generator().manual_seed(3)
        common: dict[str, Any] = {"num_workers": workers, "in_order": in_order}
        if kind == "graph":
            node = graph(in_order, async_items, ic, n)
            close_after.append(node)  # an AsyncFetcher keeps its event loop across epochs
            return ThreadLoader(node, batch_size=MATRIX_BATCH, **common)
        if kind == "iterable":
            return ThreadLoader(Shards(n), batch_size=MATRIX_BATCH, **common)
        data = AsyncItems(n) if async_items else Items(n)
        common["item_concurrency"] = concurrency
        if kind == "sampler":
            return ThreadLoader(data, batch_size=MATRIX_BATCH, shuffle=True, generator=g, **common)
        weighted = WeightedRandomSampler([1.0 + i % 3 for i in range(n)], n, generator=g)
        return ThreadLoader(data, batch_sampler=BatchSampler(weighted, MATRIX_BATCH, False), **common)

    same = kind in ("iterable", "graph")
    resumed = (nw, ic) if kind == "iterable" else (RESUMED_WITH[nw], ic if same else 9 - ic)
    check_resume(make, cut, workers=(nw, resumed[0]), concurrency=(ic, resumed[1]), ordered=in_order)


# In processes, from processes (another W, item_concurrency), from threads, and to the inline loader.
MAP_STYLE_PROCESSES = [(("P2x1", "P2x2"), (1, 4)), ((4, "P2x0"), (1, 8)), (("P2x2", 0), (8, 1))]


@pytest.mark.parametrize("k", cuts(BATCHES))
@pytest.mark.parametrize(
    ("workers", "concurrency"),
    MAP_STYLE_PROCESSES,
    ids=[f"{pair_id(w)}-ic{pair_id(c)}" for w, c in MAP_STYLE_PROCESSES],
)
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("async_items", [False, True])
def test_map_style_resumes_exactly(
    k: int, workers: tuple[Any, Any], concurrency: tuple[int, int], in_order: bool, async_items: bool
) -> None:
    def make(spec: Any, ic: int) -> ThreadLoader[Any]:
        data = AsyncItems() if async_items else Items()
        g = torch.Generator().manual_seed(3)
        return ThreadLoader(
            data,
            batch_size=BATCH,
            item_concurrency=ic,
            in_order=in_order,
            shuffle=True,
            generator=g,
            **loader_workers(spec),
        )

    check_resume(make, k, workers=workers, concurrency=concurrency, ordered=in_order)


@pytest.mark.parametrize("k", cuts(BATCHES))
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("workers", [(0, 2), (2, 0), ("P2x1", "P2x2")], ids=pair_id)
def test_every_torch_sampler_resumes(k: int, sampler: str, workers: tuple[Any, Any]) -> None:
    def make(spec: Any, ic: int) -> ThreadLoader[Any]:
        return ThreadLoader(
            Items(), batch_size=BATCH, **loader_workers(spec), **SAMPLERS[sampler](torch.Generator().manual_seed(4))
        )

    check_resume(make, k, workers=workers, ordered=True)


@pytest.mark.parametrize("k", [0, 2, 5])
@pytest.mark.parametrize("workers", [(0, 2), (2, 0), ("P2x1", "P2x1")], ids=pair_id)
def test_batch_sampler_and_no_batching_resume(k: int, workers: tuple[Any, Any]) -> None:
    def batched(spec: Any, ic: int) -> ThreadLoader[Any]:
        g = torch.Generator().manual_seed(6)
        return ThreadLoader(
            Items(), batch_sampler=BatchSampler(RandomSampler(range(N), generator=g), 3, True), **loader_workers(spec)
        )

    def unbatched(spec: Any, ic: int) -> ThreadLoader[Any]:
        return ThreadLoader(
            Items(), batch_size=None, shuffle=True, generator=torch.Generator().manual_seed(6), **loader_workers(spec)
        )

    check_resume(batched, k, workers=workers, ordered=True)
    check_resume(unbatched, k, workers=workers, ordered=True)


@pytest.mark.parametrize("k", cuts(BATCHES))
@pytest.mark.parametrize("nw", [0, 1, 4, "P2x2"])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("stateful", [False, True])
def test_iterable_dataset_resumes_per_worker(k: int, nw: Any, in_order: bool, stateful: bool) -> None:
    def make(spec: Any, ic: int) -> ThreadLoader[Any]:
        data = StatefulShards() if stateful else Shards()
        return ThreadLoader(data, batch_size=BATCH, in_order=in_order, **loader_workers(spec))

    a = make(nw, 1)
    batches = len(list(a))
    a.close()
    for cut in sorted({0, 1, batches // 2, batches - 1, batches}):
        if cut == k or k == BATCHES:
            # N is no multiple of BATCH: each worker's iterator ends while its short last batch
            # is made, so the loader knows the epoch is over after the last batch.
            one_worker = isinstance(nw, int) and nw <= 1
            check_resume(make, min(cut, batches), workers=(nw, nw), ordered=in_order or one_worker)


@pytest.mark.parametrize("k", [0, 3, 7])
def test_a_graph_with_shuffler_and_filter_resumes_through_plain_state(k: int) -> None:
    def make(nw: int, ic: int) -> ThreadLoader[Any]:
        node = (
            dp.IterableWrapper(range(60))
            .shuffle(16, seed=2)
            .filter(lambda i: i % 3 != 0)
            .map(lambda i: i, num_threads=3, in_order=False)
        )
        return ThreadLoader(node, batch_size=BATCH, num_workers=nw)

    check_resume(make, k, workers=(2, 0), ordered=False)


@pytest.mark.parametrize("mode", MODES)
def test_two_successive_resumes_in_one_epoch(mode: str) -> None:
    def make() -> ThreadLoader[Any]:
        g = torch.Generator().manual_seed(9)
        return ThreadLoader(Items(), batch_size=2, shuffle=True, generator=g, in_order=False, **workers_in(mode, 3))

    full = flat(list(make()))
    first, state = take(make(), 3)
    second_loader = make()
    second_loader.load_state_dict(state)
    second, state = take(second_loader, 4)
    third = make()
    third.load_state_dict(state)
    done = flat(first + second + list(third))
    assert sorted(done) == sorted(full)
    for loader in (second_loader, third):
        loader.close()


@pytest.mark.parametrize("spec", [0, "P2x0"])
def test_a_fresh_loaders_state_resumes_to_a_full_epoch(spec: Any) -> None:
    def make() -> ThreadLoader[Any]:
        g = torch.Generator().manual_seed(2)
        return ThreadLoader(Items(), batch_size=BATCH, shuffle=True, generator=g, **loader_workers(spec))

    state = through_torch_save(make().state_dict())
    c = make()
    c.load_state_dict(state)
    assert flat(list(c)) == flat(list(make()))


@pytest.mark.parametrize("mode", MODES)
def test_a_resumed_map_style_epoch_never_loads_a_delivered_sample(mode: str) -> None:
    g = torch.Generator().manual_seed(1)
    b = ThreadLoader(Items(), batch_size=BATCH, shuffle=True, generator=g, in_order=False, **workers_in(mode, 2))
    got, state = take(b, 3)
    b.close()
    data = SharedCalls()  # counted in shared memory: the worker processes' copies count there too
    c = ThreadLoader(
        data, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(1), **workers_in(mode, 2)
    )
    c.load_state_dict(state)
    rest = flat(list(c))
    c.close()
    assert sorted(flat(got) + rest) == list(range(N))
    calls = data.loaded()
    assert set(calls) == set(rest), "a delivered sample was loaded again"
    assert all(n == 1 for n in calls.values())


@pytest.mark.parametrize("mode", MODES)
def test_resume_with_the_global_generator_replays_the_order(mode: str) -> None:
    torch.manual_seed(0)
    full = flat(list(ThreadLoader(Items(), batch_size=BATCH, shuffle=True, **workers_in(mode, 2))))
    torch.manual_seed(0)
    got, state = take(ThreadLoader(Items(), batch_size=BATCH, shuffle=True, **workers_in(mode, 2)), 2)
    torch.manual_seed(123)  # another process, seeded otherwise
    c = ThreadLoader(Items(), batch_size=BATCH, shuffle=True)
    c.load_state_dict(state)
    assert flat(got) + flat(list(c)) == full


@pytest.mark.parametrize("mode", MODES)
def test_the_epoch_after_a_global_generator_resume_draws_as_the_uninterrupted_run(mode: str) -> None:
    torch.manual_seed(0)
    a = ThreadLoader(Items(), batch_size=BATCH, shuffle=True, **workers_in(mode, 2))
    list(a)
    after = flat(list(a))
    torch.manual_seed(0)
    _, state = take(ThreadLoader(Items(), batch_size=BATCH, shuffle=True, **workers_in(mode, 2)), 2)
    torch.manual_seed(0)  # the resumed process seeds as the first did
    c = ThreadLoader(Items(), batch_size=BATCH, shuffle=True, **workers_in(mode, 2))
    c.load_state_dict(state)
    list(c)
    assert flat(list(c)) == after


@pytest.mark.parametrize("mode", MODES)
def test_persistent_workers_keep_the_saved_base_seed(mode: str) -> None:
    seeds: list[int] = []

    def make() -> ThreadLoader[Any]:
        return ThreadLoader(
            Seeds(),
            batch_size=BATCH,
            persistent_workers=True,
            generator=torch.Generator().manual_seed(8),
            **workers_in(mode, 2),
        )

    a = make()
    epochs = [flat(list(a)) for _ in range(2)]
    a.close()
    b = make()
    _, state = take(b, 2)
    b.close()
    c = make()
    c.load_state_dict(state)
    seeds = flat(list(c)) + flat(list(c))
    c.close()
    assert set(seeds) == set(epochs[0]) == set(epochs[1])


def test_a_state_from_other_arguments_is_refused_naming_them() -> None:
    state = ThreadLoader(Items(), batch_size=4).state_dict()
    with pytest.raises(ValueError, match=r"batch_size=4 there, 5 here"):
        ThreadLoader(Items(), batch_size=5).load_state_dict(state)
    with pytest.raises(ValueError, match="kind"):
        ThreadLoader(Shards(), batch_size=4).load_state_dict(state)
    shards = ThreadLoader(Shards(), batch_size=4, num_workers=2).state_dict()
    with pytest.raises(ValueError, match="num_workers must be the same"):
        ThreadLoader(Shards(), batch_size=4, num_workers=3).load_state_dict(shards)
    # Arguments that change the order or where it is drawn from, with the same number of batches.
    g = torch.Generator().manual_seed(1)
    seeded = ThreadLoader(Items(), batch_size=4, shuffle=True, generator=g).state_dict()
    with pytest.raises(ValueError, match="generator=True there, False here"):
        ThreadLoader(Items(), batch_size=4, shuffle=True).load_state_dict(seeded)
    with pytest.raises(ValueError, match="samples=23 there, 24 here"):
        ThreadLoader(Items(24), batch_size=4, shuffle=True, generator=g).load_state_dict(seeded)
    with pytest.raises(ValueError, match=r"'replacement': False.*'replacement': True"):
        sampler = RandomSampler(range(N), replacement=True, generator=g)
        ThreadLoader(Items(), batch_size=4, sampler=sampler, generator=g).load_state_dict(seeded)
    with pytest.raises(ValueError, match="not a ThreadLoader state"):
        ThreadLoader(Items()).load_state_dict({"frontier": 3})
    with pytest.raises(TypeError, match="mapping"):
        ThreadLoader(Items()).load_state_dict([1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
def test_state_is_plain_python_data(mode: str) -> None:
    loader = ThreadLoader(Items(), batch_size=2, shuffle=True, in_order=False, **workers_in(mode, 2))
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    it.close()
    loader.close()

    def check(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                assert isinstance(k, str), where
                check(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                check(v, f"{where}[{i}]")
        else:
            assert value is None or isinstance(value, int | float | str | bytes | bool), f"{where}: {type(value)}"

    check(state, "state")


@pytest.mark.parametrize("mode", MODES)
def test_state_dict_is_safe_from_another_thread_while_batches_flow(mode: str) -> None:
    loader = ThreadLoader(Items(200), batch_size=2, in_order=False, **workers_in(mode, 3))
    states: list[dict[str, Any]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            states.append(loader.state_dict())

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        total = sum(len(b) for b in loader)
    finally:
        stop.set()
        poller.join()
        loader.close()
    assert total == 200
    assert states
    frontiers = [s["frontier"] for s in states if not s["finished"]]
    assert frontiers == sorted(frontiers), "the delivered frontier only moves forward"


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_batch_counts_as_delivered(mode: str) -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(Failing(), batch_size=BATCH, in_order=False, **workers_in(mode, 2))

    b = make()
    it = iter(b)
    got: list[Any] = []
    failures = 0
    while len(got) + failures < 3:
        try:
            got.append(next(it))
        except ValueError:
            failures += 1
    state = b.state_dict()
    it.close()
    b.close()
    c = make()
    c.load_state_dict(state)
    rest: list[Any] = []
    it = iter(c)
    while True:
        try:
            rest.append(next(it))
        except ValueError:
            failures += 1
        except StopIteration:
            break
    c.close()
    assert failures == 1
    assert sorted(flat(got + rest)) == [i for i in range(N) if i // BATCH != 5 // BATCH]


def test_lightning_style_holding_one_batch_ahead_is_handled_by_state_kept_per_batch() -> None:
    # The ledger remembers recent deliveries so a state can leave out batches a consumer holds.
    from torch_threadloader.resume import IterableLedger, NodeLedger, PositionLedger

    p = PositionLedger()
    for pos in (0, 2, 1, 3):
        p.add(pos)
    assert p.state() == {"frontier": 4, "done": []}
    assert p.state(held=1) == {"frontier": 3, "done": []}
    assert p.state(held=2) == {"frontier": 1, "done": [[2, 3]]}
    w = IterableLedger(2)
    for worker in (0, 1, 0):
        w.add((worker, None, False))
    assert w.state(held=1)["workers"][0]["batches"] == 1 and w.state(held=1)["turn"] == 0
    n = NodeLedger({})
    for s in ({"a": 1}, {"a": 2}):
        n.add((s, False))
    assert n.state(held=1) == {"graph": {"a": 1}, "all_ended": False}


def _distributed(rank: int, world: int, data: Dataset[int] | None = None, mode: str = "threads") -> ThreadLoader[Any]:
    sampler = torch.utils.data.DistributedSampler(range(N + 1), num_replicas=world, rank=rank, shuffle=True, seed=4)
    return ThreadLoader(data or Items(N + 1), batch_size=BATCH, sampler=sampler, in_order=False, **workers_in(mode, 2))


@pytest.mark.parametrize(("old", "new"), [(2, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize(("k", "mode"), [(0, "threads"), (1, "threads"), (2, "threads"), (1, "processes")])
def test_another_world_size_covers_the_rest_of_the_epoch_once(
    old: int, new: int, k: int, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks simulated in one process: each rank's loader has its DistributedSampler, and the
    process group's rank and size are what the state code asks (two-process DDP runs in
    test_resume_lightning.py)."""
    from torch_threadloader import resume
    from torch_threadloader.resume import ranks

    delivered: list[int] = []
    states = []
    for rank in range(old):
        before = _distributed(rank, old, mode=mode)
        got, state = take(before, k)
        before.close()
        delivered += flat(got)
        states.append(state)
    saved = {"format": resume.FORMAT, "world_size": old, "ranks": states} if old > 1 else states[0]
    rest: list[int] = []
    lengths = []
    for rank in range(new):
        monkeypatch.setattr(ranks, "_rank_and_world", lambda rank=rank: (rank, new))
        monkeypatch.setattr(
            ranks, "_all_gather", lambda state, rank, world: [state if r == rank else None for r in range(world)]
        )
        data = SharedCalls(N + 1)  # counted in shared memory: the worker processes' copies count there too
        loader = _distributed(rank, new, data, mode)
        loader.load_state_dict(saved)
        batches = list(loader)
        loader.close()
        lengths.append(len(batches))
        rest += flat(batches)
        assert all(n == 1 for n in data.loaded().values()), "a sample was loaded twice"
        if len(batches) < 2:
            continue
        # A second resume within the dealt-out epoch is exact too.
        again = _distributed(rank, new, mode=mode)
        again.load_state_dict(saved)
        first, state = take(again, 1)
        again.close()
        resumed = _distributed(rank, new, mode=mode)
        resumed.load_state_dict(state)
        assert sorted(flat(first) + flat(list(resumed))) == sorted(flat(batches))
        resumed.close()
    assert sorted(delivered + rest) == list(range(N + 1)), "every sample once across the ranks"
    assert len(set(lengths)) == 1, f"ranks would step unequally: {lengths}"


def test_a_world_size_change_past_the_new_ranks_length_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_threadloader.resume import ranks

    before = _distributed(0, 1)
    got, state = take(before, 4)  # of 6; on 2 ranks an epoch has 3 batches each
    before.close()
    rest = []
    for rank in range(2):
        monkeypatch.setattr(ranks, "_rank_and_world", lambda rank=rank: (rank, 2))
        loader = _distributed(rank, 2)
        with pytest.warns(RuntimeWarning, match=r"after 4 batches.*has 3 in an epoch.*8 samples"):
            loader.load_state_dict(state)
        batches = list(loader)
        loader.close()
        assert len(batches) == 1
        rest += flat(batches)
    assert sorted(flat(got) + rest) == list(range(N + 1))


class EpochSampler(torch.utils.data.Sampler[int]):
    """A sampler with torch's ``Stateful`` protocol: a new order each epoch, drawn from its own
    epoch counter (no generator the loader could find)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(100 + self.epoch)).tolist()
        self.epoch += 1
        return iter(order)

    def __len__(self) -> int:
        return self.n

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])


@pytest.mark.parametrize("k", [0, 2, 5])
@pytest.mark.parametrize("workers", [(2, 0), ("P2x1", "P2x1")], ids=pair_id)
def test_a_stateful_sampler_is_asked_for_its_own_state(k: int, workers: tuple[Any, Any]) -> None:
    def make(spec: Any, ic: int) -> ThreadLoader[Any]:
        return ThreadLoader(Items(), batch_size=BATCH, sampler=EpochSampler(N), in_order=False, **loader_workers(spec))

    check_resume(make, k, workers=workers, ordered=False)


@pytest.mark.parametrize("spec", [0, "P2x1"])
def test_a_stateful_map_style_dataset_is_saved_and_loaded(spec: Any) -> None:
    """The loader's own dataset object (in process mode too: the children hold copies)."""
    data = Versioned()
    data.version = 7
    before = ThreadLoader(data, batch_size=BATCH, **loader_workers(spec))
    _, state = take(before, 1)
    before.close()
    fresh = Versioned()
    ThreadLoader(fresh, batch_size=BATCH, **loader_workers(spec)).load_state_dict(state)
    assert fresh.version == 7


# -- cases a review found (each failed before its fix) -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("persistent", [False, True])
def test_a_resumed_batch_is_loaded_by_the_worker_that_loads_it_uninterrupted(persistent: bool, mode: str) -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(
            WorkerSeeds(8),
            batch_size=2,
            generator=torch.Generator().manual_seed(2),
            persistent_workers=persistent,
            **workers_in(mode, 2),
        )

    def as_lists(batches: list[Any]) -> list[Any]:
        return [[t.tolist() for t in batch] for batch in batches]

    a = make()
    uninterrupted = as_lists(list(a))
    a.close()
    b = make()
    got, state = take(b, 1)
    b.close()
    c = make()
    c.load_state_dict(state)
    assert as_lists(got) + as_lists(list(c)) == uninterrupted, "the same worker seeds"
    c.close()


@pytest.mark.parametrize(("n", "batch", "drop_last"), [(24, 4, False), (25, 4, True), (24, None, False)])
@pytest.mark.parametrize("nw", [0, 2, "P2x1"])
def test_a_state_taken_after_the_last_batch_draws_the_next_epochs_as_uninterrupted(
    n: int, batch: int | None, drop_last: bool, nw: Any
) -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(
            Items(n),
            batch_size=batch,
            drop_last=drop_last,
            shuffle=True,
            generator=torch.Generator().manual_seed(5),
            **loader_workers(nw),
        )

    a = make()
    epochs = [flat(list(a)) for _ in range(3)]
    a.close()
    b = make()
    k = len(b)
    _, state = take(b, k)  # every batch delivered; the sampler not yet asked for more
    b.close()
    assert state["finished"]
    c = make()
    c.load_state_dict(state)
    assert [flat(list(c)) for _ in range(2)] == epochs[1:]
    c.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [2, 7])
def test_later_epochs_from_the_global_generator_draw_as_uninterrupted(k: int, mode: str) -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(Items(), batch_size=BATCH, shuffle=True, **workers_in(mode, 2))

    torch.manual_seed(0)
    a = make()
    epochs = [flat(list(a)) for _ in range(4)]
    a.close()
    torch.manual_seed(0)
    b = make()
    list(b), list(b)
    got, state = take(b, min(k, BATCHES))  # in the third epoch (7: after its last batch)
    b.close()
    torch.manual_seed(123)  # another process, seeded otherwise: the state puts the generator back
    c = make()
    c.load_state_dict(state)
    rest = [] if k >= BATCHES else flat(list(c))
    assert flat(got) + rest == epochs[2]
    assert flat(list(c)) == epochs[3]
    c.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_state_after_break_keeps_the_positions_delivered_out_of_order(mode: str) -> None:
    slow: set[int] = set()

    def make(nw: int) -> ThreadLoader[Any]:
        return ThreadLoader(
            SlowItems(slow) if nw else Items(),
            batch_size=2,
            shuffle=True,
            generator=torch.Generator().manual_seed(3),
            in_order=False,
            **(workers_in(mode, nw) if nw else {"num_workers": 0}),
        )

    full = flat(list(make(0)))
    slow.update(full[:2])  # batch 0 is held back, so batches 1, 2, 3, 5, 6 are delivered first
    b = make(4)
    first, state = take(b, 5)
    b.close()
    assert state["done"], "some positions past the frontier were delivered"
    c = make(0)  # a resume without workers
    c.load_state_dict(state)
    second = []
    for batch in c:
        second.append(batch)
        break
    state = through_torch_save(c.state_dict())  # after break: the epoch's iterator is closed
    d = make(0)
    d.load_state_dict(state)
    assert sorted(flat(first) + flat(second) + flat(list(d))) == sorted(full)


class InterruptedAt(Dataset[int]):
    """``ds[i] == i``; loading index 3 the first time raises ``KeyboardInterrupt`` (Ctrl-C)."""

    def __init__(self) -> None:
        self.interrupted = False

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        if i == 3 and not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        return i


@pytest.mark.parametrize("stats", [False, True])
def test_a_batch_interrupted_by_ctrl_c_is_loaded_again_on_resume(stats: bool) -> None:
    data = InterruptedAt()
    a = ThreadLoader(data, batch_size=1, stats=stats)
    got = []
    with pytest.raises(KeyboardInterrupt):
        for batch in a:
            got.append(int(batch))
    state = through_torch_save(a.state_dict())
    b = ThreadLoader(data, batch_size=1, stats=stats)
    b.load_state_dict(state)
    assert got + [int(x) for x in b] == list(range(8))


@pytest.mark.parametrize("nw", [0, 2])
def test_next_after_close_leaves_the_state_where_the_epoch_stopped(nw: int) -> None:
    a = ThreadLoader(Items(), batch_size=BATCH, num_workers=nw)
    it = iter(a)
    first = [next(it), next(it)]
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    state = through_torch_save(a.state_dict())
    b = ThreadLoader(Items(), batch_size=BATCH, num_workers=nw)
    b.load_state_dict(state)
    assert flat(first) + flat(list(b)) == list(range(N))


def _batches_or_err(loader: ThreadLoader[Any], start: Iterator[Any] | None = None) -> list[Any]:
    out: list[Any] = []
    it = start if start is not None else iter(loader)
    while True:
        try:
            out.append(next(it).tolist())
        except ValueError:
            out.append("ERR")
        except StopIteration:
            return out


@pytest.mark.parametrize("spec", [{}, {"worker_processes": 1}], ids=["threads", "processes"])
@pytest.mark.parametrize("k", [2, 3])
def test_an_iterable_resumed_after_an_error_batch_reads_again_what_it_read(k: int, spec: dict[str, int]) -> None:
    """One worker: the inline loader, or one worker process (of one thread)."""
    full = _batches_or_err(ThreadLoader(FailingStream(), batch_size=4, **spec))
    b = ThreadLoader(FailingStream(), batch_size=4, **spec)
    it = iter(b)
    got: list[Any] = []
    while len(got) < k:
        try:
            got.append(next(it).tolist())
        except ValueError:
            got.append("ERR")
    state = through_torch_save(b.state_dict())
    it.close()
    b.close()
    c = ThreadLoader(FailingStream(), batch_size=4, **spec)
    c.load_state_dict(state)
    assert got + _batches_or_err(c) == full
    c.close()


def test_gather_false_takes_one_ranks_state_without_a_collective(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_threadloader.resume import ranks

    monkeypatch.setattr(ranks, "_rank_and_world", lambda: (1, 2))
    b = _distributed(1, 2)
    it = iter(b)
    next(it)
    state = b.state_dict(gather=False)
    it.close()
    assert state["rank"] == 1 and state["world_size"] == 2
    c = _distributed(1, 2)
    c.load_state_dict(state)
    monkeypatch.setattr(ranks, "_rank_and_world", lambda: (0, 2))
    with pytest.raises(ValueError, match="load each rank's own state"):
        _distributed(0, 2).load_state_dict(state)


def test_a_loader_dropped_after_iter_is_freed() -> None:
    """iter() looks up its callers' frames for Lightning's fetcher: it must not keep a
    reference to the caller's locals (reading f_locals does, on CPython < 3.13)."""
    import gc
    import weakref

    def run() -> bool:
        loader = ThreadLoader(Items(8), batch_size=2)
        it = iter(loader)
        next(it)
        ref = weakref.ref(loader)
        del it, loader
        gc.collect()
        return ref() is None

    assert run()


# -- a second review: states of samplers that draw in __iter__, states between epochs, user
# states holding tensors (each failed before its fix) --------------------------------------------


def as_lists(value: Any) -> Any:
    """A batch with its tensors as (nested) lists, to compare with ``==``."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [as_lists(v) for v in value]
    return value


def epochs_of(loader: ThreadLoader[Any], count: int) -> list[list[Any]]:
    return [as_lists(list(loader)) for _ in range(count)]


def resume_in_epoch(
    make: Callable[[], ThreadLoader[Any]],
    epoch: int,
    k: int,
    make_c: Callable[[], ThreadLoader[Any]] | None = None,
    later: bool = True,
) -> None:
    """From torch's global generator seeded alike: loader B runs ``epoch`` epochs and ``k``
    batches, and loader C (``make_c``, default ``make``) resumes its state (the global
    generator seeded otherwise, as the state puts it back); B's ``k`` batches, then C's two
    epochs, are the uninterrupted run's (the second one only when ``later``)."""
    torch.manual_seed(0)
    a = make()
    want = epochs_of(a, epoch + 2)
    a.close()
    torch.manual_seed(0)
    b = make()
    epochs_of(b, epoch)
    it = iter(b)
    got = as_lists([next(it) for _ in range(k)])
    state = through_torch_save(b.state_dict())
    del it
    b.close()
    torch.manual_seed(1)
    c = (make_c or make)()
    c.load_state_dict(state)
    rest, after = epochs_of(c, 2)
    c.close()
    assert got + rest == want[epoch]
    if later:
        assert after == want[epoch + 1]


def resume_between_epochs(make: Callable[[], ThreadLoader[Any]]) -> None:
    """Loader B runs one epoch; loader C resumes B's state: C's two epochs are the
    uninterrupted run's second and third."""
    a = make()
    want = epochs_of(a, 3)
    a.close()
    b = make()
    list(b)
    state = through_torch_save(b.state_dict())
    b.close()
    c = make()
    c.load_state_dict(state)
    assert epochs_of(c, 2) == want[1:]
    c.close()


@pytest.mark.parametrize("spec", [0, 2, "P2x1"])
def test_a_stateful_samplers_own_state_is_kept_in_a_state_between_epochs(spec: Any) -> None:
    resume_between_epochs(
        lambda: ThreadLoader(Items(), batch_size=BATCH, sampler=EpochSampler(N), **loader_workers(spec))
    )


@pytest.mark.parametrize("epoch", [0, 1])
@pytest.mark.parametrize("spec", [0, 2, "P2x1"])
@pytest.mark.parametrize("kind", ["own generator", "global generator", "batch sampler"])
def test_a_sampler_that_draws_its_order_in_iter_resumes_exactly(kind: str, spec: Any, epoch: int) -> None:
    def make() -> ThreadLoader[Any]:
        g = torch.Generator().manual_seed(7)
        workers = loader_workers(spec)
        if kind == "batch sampler":
            return ThreadLoader(Items(), batch_sampler=EagerBatches(N, BATCH, g), **workers)
        sampler = EagerSampler(N, g if kind == "own generator" else None)
        return ThreadLoader(Items(), batch_size=None, sampler=sampler, **workers)

    resume_in_epoch(make, epoch, 2)


@pytest.mark.parametrize("epoch", [0, 1])
@pytest.mark.parametrize(("nw", "persistent"), [(1, False), (2, False), (2, True), ("P2x1", False)])
def test_a_state_before_the_first_batch_on_the_global_generator_resumes_exactly(
    nw: Any, persistent: bool, epoch: int
) -> None:
    """With workers the sampler is drawn by the prefetch right after iter(): a state taken
    before the first next() must replay that draw, not draw again from torch's generator."""

    def make() -> ThreadLoader[Any]:
        return ThreadLoader(
            WorkerSeeds(), batch_size=BATCH, shuffle=True, persistent_workers=persistent, **loader_workers(nw)
        )

    resume_in_epoch(make, epoch, 0)


def test_a_state_taken_before_the_first_draw_resumes_in_process_mode() -> None:
    def make(**workers: int) -> ThreadLoader[Any]:
        return ThreadLoader(Items(), batch_size=BATCH, shuffle=True, **workers)

    torch.manual_seed(0)
    want = epochs_of(make(), 2)
    torch.manual_seed(0)
    b = make()
    it = iter(b)
    state = through_torch_save(b.state_dict())
    del it
    assert state["drawn"] is False
    for workers in ({}, {"num_workers": 2}, {"worker_processes": 1}):
        torch.manual_seed(123)
        c = make(**workers)
        c.load_state_dict(state)
        assert epochs_of(c, 2) == want, workers
        c.close()


@pytest.mark.parametrize("kind", ["global generator", "graph"])
@pytest.mark.parametrize("finished", [True, False])
def test_a_loaded_state_is_the_state_until_the_next_iter(kind: str, finished: bool) -> None:
    def make() -> ThreadLoader[Any]:
        if kind == "graph":
            return ThreadLoader(dp.Sampler(N, shuffle=True, seed=5).map(lambda i: i), batch_size=BATCH)
        return ThreadLoader(Items(), batch_size=BATCH, shuffle=True)

    torch.manual_seed(0)
    want = epochs_of(make(), 2)
    torch.manual_seed(0)
    b = make()
    if finished:
        got = as_lists(list(b))
    else:
        it = iter(b)
        got = as_lists([next(it) for _ in range(2)])
        del it
    state = through_torch_save(b.state_dict())
    torch.manual_seed(123)
    c = make()
    c.load_state_dict(state)
    again = through_torch_save(c.state_dict())  # a checkpoint right after resuming
    torch.manual_seed(123)
    d = make()
    d.load_state_dict(again)
    rest = [] if finished else as_lists(list(d))
    assert got + rest == want[0]
    assert as_lists(list(d)) == want[1]


@pytest.mark.parametrize("nw", [0, 2])
def test_tensors_in_user_states_and_in_graph_buffers_are_kept_as_tensors(nw: int) -> None:
    makers: list[Callable[[], ThreadLoader[Any]]] = [
        lambda: ThreadLoader(Items(), batch_size=BATCH, sampler=GeneratorSampler(N, 1), num_workers=nw),
        lambda: ThreadLoader(NoisyStream(), batch_size=BATCH, num_workers=min(nw, 1)),
        lambda: ThreadLoader(
            dp.IterableWrapper(range(40)).map(lambda i: torch.tensor([i, 1000 + i])).shuffle(8, seed=1),
            batch_size=BATCH,
            num_workers=nw,
        ),
    ]
    for make in makers:
        want = flat([b.reshape(-1) for b in make()])
        b = make()
        got, state = take(b, 2)
        b.close()
        c = make()
        c.load_state_dict(state)
        assert flat([x.reshape(-1) for x in got + list(c)]) == want
        c.close()


# -- a third review: samplers drawing from two generators, Stateful samplers counting iter()
# calls, successive resumes before a draw, datasets without a length, older states ----------------


@pytest.mark.parametrize("k", [0, 2])
@pytest.mark.parametrize(("nw", "persistent"), [(0, False), (2, False), (2, True)])
@pytest.mark.parametrize("batched", [True, False])
def test_a_sampler_drawing_from_its_generator_and_the_global_one_resumes_exactly(
    batched: bool, nw: int, persistent: bool, k: int
) -> None:
    def make() -> ThreadLoader[Any]:
        sampler = OwnAndGlobal(N, torch.Generator().manual_seed(3))
        return ThreadLoader(
            Items(),
            batch_size=BATCH if batched else None,
            sampler=sampler,
            num_workers=nw,
            persistent_workers=persistent,
        )

    resume_in_epoch(make, 0, k)
    resume_in_epoch(make, 1, k)


@pytest.mark.parametrize("k", [0, 2])
@pytest.mark.parametrize(("nw", "nw_after"), [(2, 2), (2, 0), (0, 2), (0, 0)])
@pytest.mark.parametrize("persistent", [False, True])
def test_a_stateful_sampler_counting_its_iter_calls_resumes_its_epoch(
    persistent: bool, nw: int, nw_after: int, k: int
) -> None:
    """The resumed epoch is the uninterrupted one whatever num_workers the resume has; later
    epochs follow the new loader's calls (torch calls iter(sampler) twice an epoch with
    workers), so they are compared only when num_workers is the same."""

    def loader(workers: int) -> Callable[[], ThreadLoader[Any]]:
        return lambda: ThreadLoader(
            Items(),
            batch_sampler=CountedBatches(N, BATCH),
            num_workers=workers,
            persistent_workers=persistent and workers > 0,
        )

    for epoch in (0, 1):
        resume_in_epoch(loader(nw), epoch, k, make_c=loader(nw_after), later=nw == nw_after)


def test_two_resumes_before_the_first_draw_keep_the_later_epochs() -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(Items(), batch_size=BATCH, shuffle=True)

    torch.manual_seed(0)
    want = epochs_of(make(), 2)
    state = None
    for seed in (0, 5, 6):  # B, then C resumed from B's state, then D from C's
        torch.manual_seed(seed)
        loader = make()
        if state is not None:
            loader.load_state_dict(state)
        it = iter(loader)  # nothing delivered: the order is not drawn yet
        state = through_torch_save(loader.state_dict())
        del it
    torch.manual_seed(7)
    last = make()
    last.load_state_dict(state)
    assert epochs_of(last, 2) == want


def test_a_dataset_whose_len_raises_with_a_custom_sampler_has_a_state() -> None:
    class Unsized(Items):
        def __len__(self) -> int:
            raise NotImplementedError("length unknown")

    def make() -> ThreadLoader[Any]:
        return ThreadLoader(Unsized(), batch_size=BATCH, sampler=SequentialSampler(range(N)))

    check_resume(lambda spec, ic: make(), 2, workers=(0, 0), ordered=True)


def test_a_state_from_before_a_config_key_was_recorded_still_loads() -> None:
    g = torch.Generator().manual_seed(1)
    make = lambda: ThreadLoader(Items(), batch_size=BATCH, shuffle=True, generator=g)  # noqa: E731
    state = make().state_dict()
    for key in ("samples", "generator", "sampler_generator", "order"):
        del state["config"][key]
    make().load_state_dict(state)
    state["config"]["batch_size"] = 5
    with pytest.raises(ValueError, match="batch_size=5 there, 4 here"):
        make().load_state_dict(state)


@pytest.mark.parametrize("nw", [0, 1])
def test_a_state_that_cannot_be_copied_is_a_type_error_naming_its_owner(nw: int) -> None:
    class Locked(Shards):
        def state_dict(self) -> dict[str, Any]:
            return {"lock": threading.Lock()}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            pass

    with ThreadLoader(Locked(), batch_size=BATCH, num_workers=nw) as loader:
        with pytest.raises(TypeError, match=r"Locked.state_dict\(\) returned a state that cannot be copied"):
            next(iter(loader))


def test_a_distributed_sampler_not_set_to_the_resumed_epoch_is_set_with_a_warning() -> None:
    def make() -> ThreadLoader[Any]:
        sampler = torch.utils.data.DistributedSampler(range(16), num_replicas=1, rank=0, shuffle=True, seed=4)
        return ThreadLoader(Items(16), batch_size=BATCH, sampler=sampler)

    b = make()
    b.sampler.set_epoch(2)  # type: ignore[attr-defined]
    got, state = take(b, 2)
    c = make()  # its sampler is at epoch 0: set_epoch(2) was not called before iter()
    c.load_state_dict(state)
    with pytest.warns(RuntimeWarning, match=r"epoch is 0 and the state was taken in its epoch 2"):
        rest = list(c)
    assert sorted(flat(got) + flat(rest)) == list(range(16))
    d = make()
    d.sampler.set_epoch(2)  # type: ignore[attr-defined]
    d.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(flat(got) + flat(list(d))) == list(range(16))


def graph_loader(shape: str, nw: int) -> ThreadLoader[Any]:
    if shape == "sampler":
        node: dp.Node[int] = dp.Sampler(N, shuffle=True, seed=5).map(lambda i: i)
    else:
        node = dp.IterableWrapper(range(N)).shuffle(8, seed=2)
    return ThreadLoader(node, batch_size=BATCH, num_workers=nw)


@pytest.mark.parametrize("epoch", [1, 2])
@pytest.mark.parametrize("nw", [0, 2])
@pytest.mark.parametrize("shape", ["sampler", "shuffler"])
def test_a_graphs_state_before_the_first_batch_of_a_later_epoch_resumes_it(shape: str, nw: int, epoch: int) -> None:
    """Before an epoch's first batch a graph's state is the graph's as it opened (its
    generators carry across epochs); it replayed epoch 0."""
    resume_in_epoch(lambda: graph_loader(shape, nw), epoch, 0)


@pytest.mark.parametrize("before", ["break", "loaded"])
@pytest.mark.parametrize("nw", [0, 2])
def test_a_graphs_state_before_the_first_batch_after_a_break_or_a_load_resumes_it(before: str, nw: int) -> None:
    def first_epoch(loader: ThreadLoader[Any]) -> None:
        if before == "break":
            for _ in loader:
                break
        else:  # the epoch before ran in another loader, whose state this one loaded
            done = graph_loader("sampler", nw)
            list(done)
            loader.load_state_dict(done.state_dict())

    a = graph_loader("sampler", nw)
    first_epoch(a)
    it = iter(a)
    state = through_torch_save(a.state_dict())
    want = [as_lists(list(it)), as_lists(list(a))]
    c = graph_loader("sampler", nw)
    c.load_state_dict(state)
    assert epochs_of(c, 2) == want


@pytest.mark.parametrize("k", [0, 1, "end"])
@pytest.mark.parametrize(("nw", "persistent"), [(0, False), (2, True), (2, False)])
def test_a_stateful_iterable_whose_copies_live_on_keeps_their_state_between_epochs(
    nw: int, persistent: bool, k: Any
) -> None:
    """Without workers the dataset itself, with persistent workers each copy, goes on from one
    epoch to the next (torch's DataLoader counts EpochStream's epochs there too); a state taken
    in a later epoch, before a worker's first batch, or between epochs keeps their states."""

    def make() -> ThreadLoader[Any]:
        return ThreadLoader(EpochStream(), batch_size=BATCH, num_workers=nw, persistent_workers=persistent)

    torch_epochs = torch.utils.data.DataLoader(EpochStream(), batch_size=BATCH)
    if nw == 0:
        assert [as_lists(list(torch_epochs))[0][0] for _ in range(3)] == [0, 100, 200]
    if k == "end":
        resume_between_epochs(make)
    else:
        resume_in_epoch(make, 1, k)


def test_a_dataset_whose_state_exists_only_once_iterated_still_loads() -> None:
    class StateAfterIter(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Iterator[int]:
            self.position = 0
            while self.position < 6:
                self.position += 1
                yield self.position - 1

        def state_dict(self) -> dict[str, Any]:
            return {"position": self.position}  # AttributeError before the first __iter__

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.position = int(state["position"])

    with ThreadLoader(StateAfterIter(), batch_size=2) as loader:
        assert epochs_of(loader, 2) == [[[0, 1], [2, 3], [4, 5]]] * 2


@pytest.mark.parametrize("mode", MODES)
def test_persistent_workers_that_ran_before_a_load_take_the_states_base_seed(mode: str) -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(
            WorkerSeeds(), batch_size=BATCH, shuffle=True, persistent_workers=True, **workers_in(mode, 2)
        )

    torch.manual_seed(0)
    want = epochs_of(make(), 2)
    torch.manual_seed(0)
    b = make()
    got, state = take(b, 2)
    b.close()
    torch.manual_seed(55)
    c = make()
    list(c)  # its workers exist, with another base seed
    c.load_state_dict(state)
    rest, after = epochs_of(c, 2)
    c.close()
    assert as_lists(got) + rest == want[0]
    assert after == want[1]


# -- found in review --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("stateful", [False, True])
@pytest.mark.parametrize(("first", "second"), [(3, 4), (4, 2), (2, 5)])
def test_two_successive_resumes_of_a_sharded_iterable_keep_every_batch(
    first: int, second: int, stateful: bool, in_order: bool, mode: str
) -> None:
    """Three workers share the stream; B delivers ``first`` batches, C resumes B's state and
    delivers ``second``, D resumes C's: B's, C's and D's batches are the uninterrupted run's.
    (A worker without state of its own reads again the items it delivered: the count of a
    second resume must not add those read again by the first.)"""

    def make() -> ThreadLoader[Any]:
        data = StatefulShards() if stateful else Shards()
        return ThreadLoader(data, batch_size=2, in_order=in_order, **workers_in(mode, 3))

    with make() as a:
        full = flat(list(a))
    with make() as b:
        got_b, state = take(b, first)
    with make() as c:
        c.load_state_dict(state)
        got_c, state = take(c, second)
    with make() as d:
        d.load_state_dict(state)
        got_d = list(d)
    done = flat(got_b + got_c + got_d)
    assert sorted(done) == sorted(full), "a batch was lost or repeated across the two resumes"
    if in_order:
        assert done == full


@pytest.mark.parametrize("epoch", [0, 1])
@pytest.mark.parametrize(("nw", "nw_after"), [(0, 0), (0, 2), (2, 2), (2, 0)])
def test_a_state_before_the_first_batch_of_an_async_global_shuffle_resumes_exactly(
    nw: int, nw_after: int, epoch: int
) -> None:
    """An async dataset, item_concurrency=8, the order drawn from torch's global
    generator (no generator=), the state taken before the first batch: the resumed run (with
    other workers and concurrency too) gives the uninterrupted run's batches."""

    def loader(workers: int, concurrency: int) -> Callable[[], ThreadLoader[Any]]:
        return lambda: ThreadLoader(
            AsyncItems(MATRIX_N),
            batch_size=MATRIX_BATCH,
            shuffle=True,
            num_workers=workers,
            item_concurrency=concurrency,
        )

    resume_in_epoch(loader(nw, 8), epoch, 0, make_c=loader(nw_after, 8 if nw_after == nw else 1))
