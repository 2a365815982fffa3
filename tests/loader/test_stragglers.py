"""``defer_stragglers=True``: batches from the samples that finish first, within a window.

Exactness (every sample once, batches full but the last, ``drop_last``), the window's bound,
DDP (every rank as many batches), refusals naming the argument, and resume (hypothesis over
cut points, windows and ``num_workers``); the datapipes node (``ReadyBatcher``) on its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset, DistributedSampler

import datapipes as dp
from tests.fixtures.datasets import UnshardedStream
from tests.fixtures.values import through_torch_save
from torch_threadloader import ThreadLoader

SLOW = 0.02  # seconds a straggler sleeps (the others: none)


def _slow(i: int, every: int) -> bool:
    return every > 0 and i % every == 3


class Stragglers(Dataset[int]):
    """``dataset[i] == i``; every ``every``-th sample (from 3) sleeps ``SLOW`` seconds."""

    def __init__(self, n: int, every: int = 0) -> None:
        self.n = n
        self.every = every

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if _slow(i, self.every):
            time.sleep(SLOW)
        return i


class AsyncStragglers(Stragglers):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        await asyncio.sleep(SLOW if _slow(i, self.every) else 0)
        return i


def _flat(batches: list[Any]) -> list[int]:
    return [int(i) for b in batches for i in b]


def _deferring_loader(dataset: Any, **kw: Any) -> ThreadLoader[Any]:
    kw.setdefault("batch_size", 8)
    kw.setdefault("defer_stragglers", True)
    return ThreadLoader(dataset, **kw)


# -- exactness --------------------------------------------------------------------------------
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(
    "make,kw",
    [
        (Stragglers, {"num_workers": 3}),
        (Stragglers, {"num_workers": 2, "item_concurrency": 3}),
        (AsyncStragglers, {"num_workers": 0, "item_concurrency": 4}),
        (AsyncStragglers, {"num_workers": 2, "item_concurrency": 3}),
    ],
)
def test_every_sample_once_and_full_batches(make: Any, kw: dict[str, Any], drop_last: bool) -> None:
    n = 101
    with _deferring_loader(make(n, every=10), shuffle=True, drop_last=drop_last, **kw) as loader:
        batches = [b.tolist() for b in loader]
        assert len(batches) == len(loader)
        sizes = [len(b) for b in batches]
        assert all(s == 8 for s in sizes[:-1])
        flat = _flat(batches)
        assert len(flat) == len(set(flat))
        if drop_last:
            assert sizes[-1] == 8 and len(flat) == (n // 8) * 8
            # torch's drop_last: the samples left out are the last of the order
            torch_order = [i for b in torch.utils.data.BatchSampler(range(n), 8, False) for i in b]
            assert len(set(range(n)) - set(flat)) == n % 8 and len(torch_order) == n
        else:
            assert sorted(flat) == list(range(n))


def test_a_straggler_goes_into_a_later_batch() -> None:
    """Sample 3 sleeps; the other samples of its in-order batch come back before it."""
    with _deferring_loader(Stragglers(64, every=64), num_workers=4) as loader:
        batches = [b.tolist() for b in loader]
    first = batches[0]
    assert 3 not in first  # its batch went on without it
    assert sorted(_flat(batches)) == list(range(64))


def test_same_order_of_draws_as_torch() -> None:
    """The samples of the epoch are those torch's batch sampler draws from the same seed."""
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    with _deferring_loader(Stragglers(50), num_workers=2, shuffle=True, generator=g1) as loader:
        ours = sorted(_flat([b.tolist() for b in loader]))
    theirs = sorted(
        i for b in torch.utils.data.DataLoader(Stragglers(50), batch_size=8, shuffle=True, generator=g2) for i in b
    )
    assert ours == theirs == list(range(50))


def test_return_indices_name_the_samples_of_each_batch() -> None:
    with _deferring_loader(Stragglers(20, every=5), num_workers=2, return_indices=True) as loader:
        for indices, batch in loader:
            assert list(indices) == batch.tolist()


def test_errors_are_raised_at_their_sample_and_the_epoch_goes_on() -> None:
    class Failing(Stragglers):
        def __getitem__(self, i: int) -> int:
            if i == 5:
                raise KeyError(i)
            return super().__getitem__(i)

    with _deferring_loader(Failing(24), num_workers=2) as loader:
        it = iter(loader)
        got: list[int] = []
        raised = 0
        while True:
            try:
                got.extend(next(it).tolist())
            except KeyError:
                raised += 1
            except StopIteration:
                break
    assert raised == 1
    assert sorted(got) == [i for i in range(24) if i != 5]


# -- bounds -----------------------------------------------------------------------------------
@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("window", [None, 60])
def test_no_sample_starts_a_window_past_the_oldest_undelivered(is_async: bool, window: int | None) -> None:
    """Each ``dataset[i]`` call (sequential order: index == position) starts below the oldest
    sample not yet collated plus the window; a slow sample is delivered within it."""
    lock = threading.Lock()
    delivered: set[int] = set()
    frontier = [0]
    late: list[tuple[int, int]] = []

    def check(i: int) -> None:
        with lock:
            if i >= frontier[0] + limit:
                late.append((i, frontier[0]))

    class Watched(Stragglers):
        def __getitem__(self, i: int) -> int:
            check(i)
            return super().__getitem__(i)

    class AsyncWatched(AsyncStragglers):
        async def __getitem__(self, i: int) -> int:  # type: ignore[override]
            check(i)
            return await super().__getitem__(i)

    def collate(samples: list[int]) -> list[int]:
        with lock:
            delivered.update(samples)
            while frontier[0] in delivered:
                frontier[0] += 1
        return samples

    kw: dict[str, Any] = {"num_workers": 2, "item_concurrency": 2} if is_async else {"num_workers": 3}
    if window is None:
        kw["prefetch_factor"] = 1
    with _deferring_loader(
        (AsyncWatched if is_async else Watched)(300, every=25),
        collate_fn=collate,
        straggler_window=window,
        batch_size=4,
        **kw,
    ) as loader:
        from torch_threadloader.kinds.stragglers import window_of

        limit = window_of(loader._plan, is_async)
        batches = list(loader)
    assert late == []
    assert sorted(_flat(batches)) == list(range(300))


@pytest.mark.parametrize("workers", [0, 2])
def test_async_awaits_at_most_its_concurrency_and_holds_at_most_its_capacity(workers: int) -> None:
    """Async: at most ``max(num_workers, 1) * item_concurrency`` samples awaited at once (a
    remote store's connection bound), however many wait their turn; started and not yet
    collated, at most the capacity (``prefetch_factor`` batches per worker) plus a batch."""
    from torch_threadloader.kinds.stragglers import capacity

    lock = threading.Lock()
    awaiting = [0, 0]  # now, most
    started: set[int] = set()
    held = [0]

    class Counted(AsyncStragglers):
        async def __getitem__(self, i: int) -> int:  # type: ignore[override]
            with lock:
                awaiting[0] += 1
                awaiting[1] = max(awaiting)
                started.add(i)
                held[0] = max(held[0], len(started))
            try:
                await asyncio.sleep(0.002 * (i % 3))
                return i
            finally:
                with lock:
                    awaiting[0] -= 1

    def collate(samples: list[int]) -> list[int]:
        with lock:
            started.difference_update(samples)
        return samples

    with _deferring_loader(
        Counted(200), num_workers=workers, item_concurrency=3, batch_size=4, collate_fn=collate
    ) as loader:
        batches = list(loader)
    assert sorted(_flat(batches)) == list(range(200))
    assert awaiting[1] == 3 * max(workers, 1)
    most = capacity(num_workers=workers, item_concurrency=3, prefetch=2, batch_size=4, is_async=True)
    assert held[0] <= most + 4


def test_a_window_below_the_least_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="straggler_window=10 is too small"):
        _deferring_loader(Stragglers(10), num_workers=2, straggler_window=10)
    with pytest.raises(ValueError, match="straggler_window"):
        _deferring_loader(Stragglers(10), num_workers=2, straggler_window=0)


# -- DDP ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("n", [37, 64])
def test_every_rank_gets_as_many_batches(n: int, drop_last: bool) -> None:
    counts = []
    seen: list[int] = []
    for rank in range(3):
        sampler = DistributedSampler(Stragglers(n), num_replicas=3, rank=rank, shuffle=True, seed=1)  # type: ignore[arg-type]
        with _deferring_loader(Stragglers(n, every=7), sampler=sampler, num_workers=2, drop_last=drop_last) as loader:
            batches = [b.tolist() for b in loader]
        counts.append(len(batches))
        assert all(len(b) == 8 for b in batches[:-1])
        seen.extend(_flat(batches))
    assert len(set(counts)) == 1
    if not drop_last:
        assert set(seen) == set(range(n))


# -- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dataset,kw,words",
    [
        (Stragglers(8), {"num_workers": 0}, "num_workers=0"),
        (UnshardedStream(4), {"num_workers": 2}, "kind 'iterable'"),
        (dp.Mapper(dp.Sampler(4), lambda i: i), {"num_workers": 1}, "kind 'node'"),
        (Stragglers(8), {"num_workers": 2, "worker_processes": 1}, "worker_processes"),
        (Stragglers(8), {"num_workers": 2, "on_error": "skip"}, "on_error"),
        (Stragglers(8), {"num_workers": 2, "max_bytes_in_flight": 1 << 20}, "max_bytes_in_flight"),
    ],
)
def test_refused_where_it_does_not_apply(dataset: Any, kw: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match="defer_stragglers=True does not apply") as info:
        _deferring_loader(dataset, **kw)
    assert words in str(info.value)


def test_refused_with_a_batch_sampler() -> None:
    batches = torch.utils.data.BatchSampler(range(8), 4, False)
    with pytest.raises(ValueError, match="defer_stragglers=True does not apply to batches cut by a batch_sampler"):
        ThreadLoader(Stragglers(8), batch_sampler=batches, num_workers=2, defer_stragglers=True)


def test_set_after_construction_is_checked_and_replans() -> None:
    loader = ThreadLoader(Stragglers(16), batch_size=4, num_workers=0)
    with pytest.raises(ValueError, match="num_workers=0"):
        loader.defer_stragglers = True
    assert loader.defer_stragglers is False
    loader.num_workers = 2
    loader.defer_stragglers = True
    assert loader._plan.defer_stragglers
    assert sorted(_flat([b.tolist() for b in loader])) == list(range(16))
    with pytest.raises(TypeError, match="defer_stragglers must be a bool"):
        loader.defer_stragglers = 1
    loader.close()


# -- resume -------------------------------------------------------------------------------------
def _cut_and_resume(make: Any, kw: dict[str, Any], cut: int, resume_kw: dict[str, Any]) -> tuple[list[int], list[int]]:
    with _deferring_loader(make, **kw) as loader:
        it = iter(loader)
        before = [b.tolist() for _, b in zip(range(cut), it, strict=False)]
        state = through_torch_save(loader.state_dict())
        it.close()
    with _deferring_loader(make, **{**kw, **resume_kw}) as again:
        again.load_state_dict(state)
        after = [b.tolist() for b in again]
    return _flat(before), _flat(after)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.integers(0, 12),  # 13 batches: a cut after the last is the next epoch
    window=st.one_of(st.none(), st.integers(40, 90)),  # the least: 4 workers * 8 + 8
    workers=st.integers(1, 4),
    resume_workers=st.integers(1, 4),
    is_async=st.booleans(),
)
def test_resume_yields_exactly_the_samples_left(
    cut: int, window: int | None, workers: int, resume_workers: int, is_async: bool
) -> None:
    n = 97
    make = (AsyncStragglers if is_async else Stragglers)(n, every=9)
    kw = {"num_workers": workers, "shuffle": True, "generator": torch.Generator().manual_seed(3), "prefetch_factor": 1}
    kw["straggler_window"] = window
    resume_kw = {"num_workers": resume_workers, "generator": torch.Generator().manual_seed(3)}
    before, after = _cut_and_resume(make, kw, cut, resume_kw)
    assert len(before) + len(after) == n
    assert sorted(before + after) == list(range(n))


def test_state_counts_samples_and_its_window_is_bounded() -> None:
    with _deferring_loader(Stragglers(200, every=11), num_workers=3, straggler_window=80, prefetch_factor=1) as loader:
        it = iter(loader)
        for _ in range(6):
            next(it)
        state = loader.state_dict()
        it.close()
    assert state["config"]["defer_stragglers"] is True
    done = [p for a, b in state["done"] for p in range(a, b)]
    assert state["frontier"] + len(done) == 6 * 8
    assert all(p < state["frontier"] + 80 for p in done)


def test_a_state_of_the_other_mode_is_refused() -> None:
    with ThreadLoader(Stragglers(40), batch_size=8, num_workers=2) as plain:
        it = iter(plain)
        next(it)
        state = plain.state_dict()
        it.close()
    with (
        _deferring_loader(Stragglers(40), num_workers=2) as loader,
        pytest.raises(ValueError, match="defer_stragglers"),
    ):
        loader.load_state_dict(state)


def test_held_batches_are_not_counted_delivered() -> None:
    from torch_threadloader.resume import SampleLedger

    ledger = SampleLedger()
    ledger.add((1, 0, 3))
    ledger.add((2, 5))
    assert ledger.state() == {"frontier": 4, "done": [[5, 6]]}
    assert ledger.state(held=1) == {"frontier": 2, "done": [[3, 4]]}
    assert ledger.state(held=2) == {"frontier": 0, "done": []}
    ledger.add(4)  # a failed sample's own position
    assert ledger.state() == {"frontier": 6, "done": []}


# -- the datapipes node -------------------------------------------------------------------------
def test_ready_batcher_node() -> None:
    def fn(x: int) -> int:
        time.sleep(SLOW if x == 2 else 0)
        return x

    node = dp.ReadyBatcher(dp.ThreadMapper(range(40), fn, num_threads=3, in_order=False), 5, window=20)
    batches = list(node)
    assert all(len(b) == 5 for b in batches)
    assert 2 not in batches[0]
    assert sorted(_flat(batches)) == list(range(40))
    with pytest.raises(ValueError, match="in_order=False"):
        dp.ReadyBatcher(dp.ThreadMapper(range(4), fn), 2)
    with pytest.raises(ValueError, match="window must be an int >= 11"):
        dp.ReadyBatcher(dp.ThreadMapper(range(4), fn, num_threads=3, in_order=False), 5, window=10)


def test_ready_batcher_resumes_from_its_state() -> None:
    def make() -> dp.ReadyBatcher[int]:
        return dp.ReadyBatcher(dp.ThreadMapper(range(30), lambda x: x, num_threads=2, in_order=False), 4)

    node = make()
    it = iter(node)
    first = [next(it) for _ in range(3)]
    state = node.state_dict()
    it.close()
    again = make()
    again.load_state_dict(state)
    rest = list(again)
    assert sorted(_flat(first) + _flat(rest)) == list(range(30))
    assert all(len(b) == 4 for b in rest[:-1])
