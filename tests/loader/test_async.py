"""Async map-style datasets: coroutines on the loader's one event-loop thread."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings

import pytest
import torch
from torch.utils.data import DataLoader

from tests.fixtures.datasets import AsyncGateAt, AsyncRange, RangeDataset, moment
from tests.fixtures.values import assert_same
from torch_threadloader import ThreadLoader
from torch_threadloader.concurrency import async_prefetch


@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("item_concurrency", [1, 4])
def test_async_dataset_yields_the_batches_of_its_sync_twin(num_workers, item_concurrency):
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    ref = list(DataLoader(RangeDataset(37), batch_size=4, shuffle=True, generator=g1))
    ds = AsyncRange(37)
    with ThreadLoader(
        ds,
        batch_size=4,
        shuffle=True,
        generator=g2,
        num_workers=num_workers,
        item_concurrency=item_concurrency,
        worker_copy="shallow",  # the copies record their threads in the dataset's set
    ) as loader:
        got = list(loader)
    assert_same(ref, got)
    assert ds.loop_threads == {"threadloader-loop"}


@pytest.mark.parametrize("num_workers,item_concurrency", [(0, 1), (0, 8), (0, 48), (2, 4), (4, 16)])
def test_coroutines_in_flight_are_bounded_by_workers_times_item_concurrency(num_workers, item_concurrency):
    """Reached too, past one batch's items: the batches loading share the bound (by default as
    many as it fills)."""
    bound = max(num_workers, 1) * item_concurrency
    ds = AsyncRange(96, delay=0.02)
    # worker_copy="shallow": the copies count in the dataset's one counter
    with ThreadLoader(
        ds, batch_size=16, num_workers=num_workers, item_concurrency=item_concurrency, worker_copy="shallow"
    ) as loader:
        assert sum(len(b) for b in loader) == 96
    assert ds.peak == bound


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_async_batch_is_collated_on_the_loop_so_next_only_hands_it_over(num_workers):
    """As torch's worker collates its batch: ``collate_fn`` runs on the loop's thread (never
    the caller's), as the batch's worker, with torch's ``get_worker_info()`` hidden so that
    ``default_collate`` makes no shared-memory tensors."""
    seen = []

    def collate(samples):
        seen.append((threading.current_thread().name, torch.utils.data.get_worker_info()))
        return torch.utils.data.default_collate(samples)

    with ThreadLoader(AsyncRange(12), batch_size=4, num_workers=num_workers, collate_fn=collate) as loader:
        got = list(loader)
    assert_same(got, list(DataLoader(RangeDataset(12), batch_size=4)))
    assert not any(batch.is_shared() for batch in got)
    assert seen == [("threadloader-loop", None)] * 3


def test_async_batch_size_none_converts_single_items():
    with ThreadLoader(AsyncRange(5), batch_size=None, num_workers=2) as loader:
        got = list(loader)
    assert_same(got, list(DataLoader(RangeDataset(5), batch_size=None)))


def test_async_error_is_raised_for_its_batch_and_loading_goes_on():
    ds = AsyncRange(8, fail_at=5)
    with ThreadLoader(ds, batch_size=2, num_workers=2) as loader:
        it = iter(loader)
        assert next(it).tolist() == [0, 1]
        assert next(it).tolist() == [2, 3]
        with pytest.raises(KeyError) as info:
            next(it)
        assert any("item #2" in note for note in info.value.__notes__)
        assert next(it).tolist() == [6, 7]
        with pytest.raises(StopIteration):
            next(it)


@pytest.mark.parametrize("persistent", [False, True])
def test_break_cancels_coroutines_in_flight_and_close_awaits_aclose(persistent):
    ds = AsyncRange(64, delay=5.0)
    loader = ThreadLoader(
        ds,
        batch_size=8,
        num_workers=2,
        item_concurrency=4,
        timeout=0.2,
        persistent_workers=persistent,
        worker_copy="shallow",  # the copies count in the dataset's one counter
    )
    it = iter(loader)
    with pytest.raises(TimeoutError):
        next(it)
    it.close()
    assert ds.cancelled == ds.peak == 8  # both batches' coroutines were cancelled and awaited
    assert ds.in_flight == 0
    loop_alive = [t.name for t in threading.enumerate() if t.name == "threadloader-loop"]
    if persistent:
        assert loop_alive  # the loader keeps it until close()
        assert not ds.closed
    else:
        assert not loop_alive  # the epoch owned it, and awaited aclose() when it ended
        assert ds.closed
    loader.close()
    assert ds.closed
    assert not [t.name for t in threading.enumerate() if t.name.startswith("threadloader")]


def test_async_return_indices():
    with ThreadLoader(AsyncRange(6), batch_size=4, return_indices=True, num_workers=1) as loader:
        pairs = list(loader)
    assert [p[0] for p in pairs] == [[0, 1, 2, 3], [4, 5]]
    assert [p[1].tolist() for p in pairs] == [[0, 1, 2, 3], [4, 5]]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torchs_subset_and_concat_of_async_datasets_stay_async(num_workers):
    # random_split of an async dataset gives Subsets whose __getitem__ returns the coroutine.
    part = torch.utils.data.random_split(AsyncRange(20), [15, 5], torch.Generator().manual_seed(1))[0]
    twin = torch.utils.data.Subset(RangeDataset(20), part.indices)
    both = torch.utils.data.ConcatDataset([AsyncRange(6), AsyncRange(4)])
    for data, ref in ((part, twin), (both, torch.utils.data.ConcatDataset([RangeDataset(6), RangeDataset(4)]))):
        with ThreadLoader(data, batch_size=4, num_workers=num_workers, item_concurrency=2) as loader:
            assert_same(list(DataLoader(ref, batch_size=4)), list(loader))


def test_a_concat_of_async_and_sync_datasets_is_refused_naming_it():
    with pytest.raises(ValueError, match="ConcatDataset of async and sync datasets"):
        ThreadLoader(torch.utils.data.ConcatDataset([AsyncRange(3), RangeDataset(3)]))
    with pytest.raises(ValueError, match="StackDataset of async datasets"):
        ThreadLoader(torch.utils.data.StackDataset(AsyncRange(3), RangeDataset(3)))


def test_a_subset_of_a_dataset_with_async_getitems_awaits_its_batches():
    class AsyncBatches(RangeDataset):
        async def __getitems__(self, indices):
            return [i * 10 for i in indices]

    data = torch.utils.data.Subset(AsyncBatches(10), [1, 3, 5, 7, 9])
    with ThreadLoader(data, batch_size=4) as loader:
        assert [b.tolist() for b in loader] == [[10, 30, 50, 70], [90]]


class _Recorded(AsyncRange):
    """``await ds[i] == i`` after a moment that depends on ``i`` (items finish out of order),
    recording the order the items start in."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.starts: list[int] = []

    async def __getitem__(self, i: int) -> int:
        self.starts.append(i)  # only on the loop thread
        await asyncio.sleep(moment(i) * 2)
        return i


@pytest.mark.parametrize("num_workers,item_concurrency", [(0, 1), (0, 3), (2, 1), (3, 4)])
@pytest.mark.parametrize("in_order", [True, False])
def test_items_start_in_the_epochs_order_across_every_batch_loading(num_workers, item_concurrency, in_order):
    """Items begin in the epoch's order across the batches loading (within a slot's worth: the
    order slots are given in is checked exactly in test_item_slots.py)."""
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    order = [int(i) for b in DataLoader(RangeDataset(45), batch_size=4, shuffle=True, generator=g1) for i in b]
    ds = _Recorded(45)
    loader = ThreadLoader(
        ds,
        batch_size=4,
        shuffle=True,
        generator=g2,
        num_workers=num_workers,
        item_concurrency=item_concurrency,
        in_order=in_order,
        worker_copy="shallow",  # the workers' copies record in one list
    )
    with loader:
        got = sorted(int(i) for b in loader for i in b)
    assert got == list(range(45))
    assert sorted(ds.starts) == list(range(45))
    batches = [order[i : i + 4] for i in range(0, 45, 4)]
    if item_concurrency == 1 and num_workers > 1:
        # Each batch loads item after item (as torch's worker): its items in the epoch's order.
        assert [[i for i in ds.starts if i in set(b)] for b in batches] == batches
        return
    # A freed slot goes to the earliest waiting item, which begins at its task's next step; an
    # item taking a slot freed meanwhile may begin just before it: never a slot's worth out of place.
    limit = max(num_workers, 1) * item_concurrency
    place = {item: n for n, item in enumerate(order)}
    assert all(abs(n - place[item]) < limit for n, item in enumerate(ds.starts)), (ds.starts, order)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_slow_item_holds_one_slot_not_its_batch(num_workers):
    """While item 0 is stuck, the other slots load the next batches' items: the gate opens only
    once every item of the batches after batch 0 that fit in the bound has started."""
    workers = max(num_workers, 1)
    behind = list(range(4, 4 * workers * 2))  # the items of the other batches loading (prefetch 2)
    ds = AsyncGateAt(64, gated={0})
    timeout = 60 if num_workers else 0  # (torch's: no timeout without workers)
    with ThreadLoader(
        ds, batch_size=4, num_workers=num_workers, item_concurrency=4, timeout=timeout, worker_copy="shallow"
    ) as loader:
        it = iter(loader)
        opener = threading.Thread(target=ds.open_when_started, args=(behind,), kwargs={"patience": None})
        opener.start()
        try:
            assert next(it).tolist() == [0, 1, 2, 3]
        finally:
            ds.gate.set()
            opener.join()
        assert sum(len(b) for b in it) == 60
    assert set(behind) <= set(ds.started[: len(behind) + 4])


@pytest.mark.parametrize("num_workers,prefetch_factor", [(0, None), (1, 1), (2, 3)])
def test_batches_loading_or_ready_are_bounded_by_workers_times_prefetch(num_workers, prefetch_factor):
    bound = max(num_workers, 1) * async_prefetch(prefetch_factor if num_workers else None, 4, 8)
    ds = AsyncGateAt(200, gated=set())
    with warnings.catch_warnings():  # prefetch_factor=1: item_concurrency=8 is more than reachable
        warnings.simplefilter("ignore", RuntimeWarning)
        loader = ThreadLoader(
            ds,
            batch_size=4,
            num_workers=num_workers,
            item_concurrency=8,
            prefetch_factor=prefetch_factor,
            worker_copy="shallow",  # the workers' copies record in one list
        )
    with loader:
        it = iter(loader)
        next(it)  # the first `bound` batches were pulled; the next pull is at the next next()
        deadline = time.monotonic() + 60
        while len(set(ds.started)) < 4 * bound and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.1)  # nothing more starts
        assert max(ds.started) // 4 + 1 == bound
        assert len(list(it)) == 50 - 1


def _drawing_collate(samples):
    return torch.tensor(samples), torch.randint(1000, ())


@pytest.mark.parametrize("num_workers", [0, 3])
def test_a_workers_batches_are_collated_in_its_order_whichever_finishes_first(num_workers):
    """A ``collate_fn`` that draws from the worker's random state draws in torch's order,
    though the worker's later batches may finish loading first."""

    class Uneven(AsyncRange):
        async def __getitem__(self, i: int) -> int:
            await asyncio.sleep(0.02 if (i // 4) % 2 == 0 else 0.0)  # even batches are slow
            return i

    def epoch(ds):
        with ThreadLoader(
            ds,
            batch_size=4,
            num_workers=num_workers,
            item_concurrency=4,
            collate_fn=_drawing_collate,
            generator=torch.Generator().manual_seed(11),
        ) as loader:
            return [(b.tolist(), int(r)) for b, r in loader]

    torch.manual_seed(5)
    ref = epoch(RangeDataset(32))  # worker threads: each collates its batches one by one
    torch.manual_seed(5)
    assert epoch(Uneven(32)) == ref
