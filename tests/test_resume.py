"""Exact resume: ``ThreadLoader.state_dict()`` / ``load_state_dict()``.

The oracle: an uninterrupted run of two epochs (loader A). Loader B, built the same way, yields
``k`` batches of its first epoch, then its state goes through ``torch.save`` /
``torch.load(weights_only=True)`` into loader C (a fresh process would do the same), which may
have other ``num_workers`` / ``item_concurrency``. Then B's ``k`` batches plus C's first epoch
are A's first epoch (every sample once; in order when ``in_order=True``), and C's next epoch
is A's second. Items sleep for a random moment so that workers finish out of order.
"""

from __future__ import annotations

import asyncio
import io
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    Dataset,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

import datapipes as dp
from torch_threadloader import ThreadLoader

N = 23  # samples: batches of 4 leave a short last one
BATCH = 4


def jitter(i: int) -> float:
    return random.Random(i * 7919 + time.perf_counter_ns() % 97).random() * 0.002


class Items(Dataset[int]):
    """Item ``i`` is ``i``, after a random moment; counts every ``__getitem__`` call."""

    def __init__(self, n: int = N) -> None:
        self.n = n
        self.calls: Counter[int] = Counter()
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.calls[i] += 1
        time.sleep(jitter(i))
        return i


class AsyncItems(Items):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        with self.lock:
            self.calls[i] += 1
        await asyncio.sleep(jitter(i))
        return i


class Shards(IterableDataset[int]):
    """``range(n)`` split between workers by ``get_worker_info()``, as torch documents."""

    def __init__(self, n: int = N) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            time.sleep(jitter(i))
            yield i


class StatefulShards(Shards):
    """The same, keeping its own position (torch's ``Stateful`` protocol)."""

    def __init__(self, n: int = N) -> None:
        super().__init__(n)
        self.position = 0

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        mine = list(range(start, self.n, step))
        while self.position < len(mine):
            i = mine[self.position]
            self.position += 1
            time.sleep(jitter(i))
            yield i
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])


def graph(in_order: bool, async_items: bool, concurrency: int) -> dp.Node[int]:
    def slow(i: int) -> int:
        time.sleep(jitter(i))
        return i

    async def aslow(i: int) -> int:
        await asyncio.sleep(jitter(i))
        return i

    source = dp.Sampler(N, shuffle=True, seed=5)
    if async_items:
        return source.async_map(aslow, max_concurrency=concurrency, in_order=in_order)
    return source.map(slow, num_threads=concurrency, in_order=in_order)


def flatten(batches: list[Any]) -> list[int]:
    return [int(v) for b in batches for v in (b.tolist() if isinstance(b, torch.Tensor) else [b])]


def through_torch_save(state: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer, weights_only=True)
    return loaded


def take(loader: ThreadLoader[Any], k: int) -> tuple[list[Any], dict[str, Any]]:
    it = iter(loader)
    got = [next(it) for _ in range(k)]
    state = loader.state_dict()
    del it
    return got, through_torch_save(state)


def check_resume(
    make: Callable[[int, int], ThreadLoader[Any]],
    k: int,
    *,
    workers: tuple[int, int],
    concurrency: tuple[int, int] = (1, 1),
    ordered: bool,
    sized: bool = True,
) -> None:
    a = make(workers[0], concurrency[0])
    epoch0, epoch1 = list(a), list(a)
    a.close()
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
    done, want = flatten(got + rest), flatten(epoch0)
    assert sorted(done) == sorted(want), f"k={k}: resumed epoch {done} is not {want} (as a multiset)"
    if ordered:
        assert done == want
    assert sorted(flatten(after)) == sorted(flatten(epoch1))
    if ordered:
        assert flatten(after) == flatten(epoch1), "the epoch after the resumed one draws as the uninterrupted run's"


def cuts(batches: int) -> list[int]:
    return sorted({0, 1, batches // 2, batches - 1, batches})


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


@pytest.mark.parametrize("k", cuts(BATCHES))
@pytest.mark.parametrize(("workers", "concurrency"), [((0, 4), (1, 8)), ((1, 0), (8, 1)), ((4, 1), (1, 1))])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("async_items", [False, True])
def test_map_style_resumes_exactly(
    k: int, workers: tuple[int, int], concurrency: tuple[int, int], in_order: bool, async_items: bool
) -> None:
    def make(nw: int, ic: int) -> ThreadLoader[Any]:
        data = AsyncItems() if async_items else Items()
        g = torch.Generator().manual_seed(3)
        return ThreadLoader(
            data, batch_size=BATCH, num_workers=nw, item_concurrency=ic, in_order=in_order, shuffle=True, generator=g
        )

    check_resume(make, k, workers=workers, concurrency=concurrency, ordered=in_order)


@pytest.mark.parametrize("k", cuts(BATCHES))
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("workers", [(0, 2), (2, 0)])
def test_every_torch_sampler_resumes(k: int, sampler: str, workers: tuple[int, int]) -> None:
    def make(nw: int, ic: int) -> ThreadLoader[Any]:
        return ThreadLoader(
            Items(), batch_size=BATCH, num_workers=nw, **SAMPLERS[sampler](torch.Generator().manual_seed(4))
        )

    check_resume(make, k, workers=workers, ordered=True)


@pytest.mark.parametrize("k", [0, 2, 5])
@pytest.mark.parametrize("nw", [0, 2])
def test_batch_sampler_and_no_batching_resume(k: int, nw: int) -> None:
    def batched(nw: int, ic: int) -> ThreadLoader[Any]:
        g = torch.Generator().manual_seed(6)
        return ThreadLoader(
            Items(), batch_sampler=BatchSampler(RandomSampler(range(N), generator=g), 3, True), num_workers=nw
        )

    def unbatched(nw: int, ic: int) -> ThreadLoader[Any]:
        return ThreadLoader(
            Items(), batch_size=None, shuffle=True, generator=torch.Generator().manual_seed(6), num_workers=nw
        )

    check_resume(batched, k, workers=(nw, 2 - nw), ordered=True)
    check_resume(unbatched, k, workers=(nw, 2 - nw), ordered=True)


@pytest.mark.parametrize("k", cuts(BATCHES))
@pytest.mark.parametrize("nw", [0, 1, 4])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("stateful", [False, True])
def test_iterable_dataset_resumes_per_worker(k: int, nw: int, in_order: bool, stateful: bool) -> None:
    def make(nw: int, ic: int) -> ThreadLoader[Any]:
        data = StatefulShards() if stateful else Shards()
        return ThreadLoader(data, batch_size=BATCH, num_workers=nw, in_order=in_order)

    a = make(nw, 1)
    batches = len(list(a))
    a.close()
    for cut in sorted({0, 1, batches // 2, batches - 1, batches}):
        if cut == k or k == BATCHES:
            # N is no multiple of BATCH: each worker's iterator ends while its short last batch
            # is made, so the loader knows the epoch is over after the last batch.
            check_resume(make, min(cut, batches), workers=(nw, nw), ordered=in_order or nw <= 1)


@pytest.mark.parametrize("k", cuts(BATCHES))
@pytest.mark.parametrize("workers", [(0, 4), (1, 0), (4, 1)])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize(("async_items", "concurrency"), [(False, 1), (False, 8), (True, 1), (True, 8)])
def test_datapipes_graph_resumes(
    k: int, workers: tuple[int, int], in_order: bool, async_items: bool, concurrency: int, close_after: list[Any]
) -> None:
    def make(nw: int, ic: int) -> ThreadLoader[Any]:
        node = graph(in_order, async_items, concurrency)
        close_after.append(node)  # an AsyncFetcher keeps its event loop across epochs
        return ThreadLoader(node, batch_size=BATCH, num_workers=nw)

    check_resume(make, k, workers=workers, ordered=in_order)


@pytest.mark.parametrize("k", [0, 3, 7])
def test_a_graph_with_shuffler_and_filter_resumes_through_plain_state(k: int) -> None:
    def make(nw: int, ic: int) -> ThreadLoader[Any]:
        node = dp.IterableWrapper(range(60)).shuffle(16, seed=2).filter(lambda i: i % 3 != 0).map(
            lambda i: i, num_threads=3, in_order=False
        )
        return ThreadLoader(node, batch_size=BATCH, num_workers=nw)

    check_resume(make, k, workers=(2, 0), ordered=False)


def test_two_successive_resumes_in_one_epoch() -> None:
    def make() -> ThreadLoader[Any]:
        g = torch.Generator().manual_seed(9)
        return ThreadLoader(Items(), batch_size=2, shuffle=True, generator=g, num_workers=3, in_order=False)

    full = flatten(list(make()))
    first, state = take(make(), 3)
    second_loader = make()
    second_loader.load_state_dict(state)
    second, state = take(second_loader, 4)
    third = make()
    third.load_state_dict(state)
    done = flatten(first + second + list(third))
    assert sorted(done) == sorted(full)
    for loader in (second_loader, third):
        loader.close()


def test_a_fresh_loaders_state_resumes_to_a_full_epoch() -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(Items(), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(2))

    state = through_torch_save(make().state_dict())
    c = make()
    c.load_state_dict(state)
    assert flatten(list(c)) == flatten(list(make()))


def test_a_resumed_map_style_epoch_never_loads_a_delivered_sample() -> None:
    g = torch.Generator().manual_seed(1)
    b = ThreadLoader(Items(), batch_size=BATCH, shuffle=True, generator=g, num_workers=2, in_order=False)
    got, state = take(b, 3)
    b.close()
    data = Items()
    c = ThreadLoader(data, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(1), num_workers=2)
    c.load_state_dict(state)
    rest = flatten(list(c))
    assert sorted(flatten(got) + rest) == list(range(N))
    assert set(data.calls) == set(rest), "a delivered sample was loaded again"
    assert all(n == 1 for n in data.calls.values())


def test_resume_with_the_global_generator_replays_the_order() -> None:
    torch.manual_seed(0)
    full = flatten(list(ThreadLoader(Items(), batch_size=BATCH, shuffle=True, num_workers=2)))
    torch.manual_seed(0)
    got, state = take(ThreadLoader(Items(), batch_size=BATCH, shuffle=True, num_workers=2), 2)
    torch.manual_seed(123)  # another process, seeded otherwise
    c = ThreadLoader(Items(), batch_size=BATCH, shuffle=True)
    c.load_state_dict(state)
    assert flatten(got) + flatten(list(c)) == full


def test_the_epoch_after_a_global_generator_resume_draws_as_the_uninterrupted_run() -> None:
    torch.manual_seed(0)
    a = ThreadLoader(Items(), batch_size=BATCH, shuffle=True, num_workers=2)
    list(a)
    after = flatten(list(a))
    torch.manual_seed(0)
    _, state = take(ThreadLoader(Items(), batch_size=BATCH, shuffle=True, num_workers=2), 2)
    torch.manual_seed(0)  # the resumed process seeds as the first did
    c = ThreadLoader(Items(), batch_size=BATCH, shuffle=True, num_workers=2)
    c.load_state_dict(state)
    list(c)
    assert flatten(list(c)) == after


def test_persistent_workers_keep_the_saved_base_seed() -> None:
    seeds: list[int] = []

    class Seeds(Items):
        def __getitem__(self, i: int) -> int:
            info = torch.utils.data.get_worker_info()
            assert info is not None
            return info.seed

    def make() -> ThreadLoader[Any]:
        return ThreadLoader(
            Seeds(),
            batch_size=BATCH,
            num_workers=2,
            persistent_workers=True,
            generator=torch.Generator().manual_seed(8),
        )

    a = make()
    epochs = [flatten(list(a)) for _ in range(2)]
    a.close()
    b = make()
    _, state = take(b, 2)
    b.close()
    c = make()
    c.load_state_dict(state)
    seeds = flatten(list(c)) + flatten(list(c))
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
    with pytest.raises(ValueError, match="not a ThreadLoader state"):
        ThreadLoader(Items()).load_state_dict({"frontier": 3})
    with pytest.raises(TypeError, match="mapping"):
        ThreadLoader(Items()).load_state_dict([1, 2])  # type: ignore[arg-type]


def test_state_is_plain_python_data() -> None:
    loader = ThreadLoader(Items(), batch_size=2, shuffle=True, num_workers=2, in_order=False)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    it.close()

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


def test_state_dict_is_safe_from_another_thread_while_batches_flow() -> None:
    loader = ThreadLoader(Items(200), batch_size=2, num_workers=3, in_order=False)
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
    assert total == 200
    assert states
    frontiers = [s["frontier"] for s in states if not s["finished"]]
    assert frontiers == sorted(frontiers), "the delivered frontier only moves forward"


def test_a_failed_batch_counts_as_delivered() -> None:
    class Failing(Items):
        def __getitem__(self, i: int) -> int:
            if i == 5:
                raise ValueError("bad sample 5")
            return super().__getitem__(i)

    def make() -> ThreadLoader[Any]:
        return ThreadLoader(Failing(), batch_size=BATCH, num_workers=2, in_order=False)

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
    assert failures == 1
    assert sorted(flatten(got + rest)) == [i for i in range(N) if i // BATCH != 5 // BATCH]


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
