"""Async map-style datasets: coroutines on the loader's one event-loop thread."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.utils.data import DataLoader

from tests.fixtures.datasets import AsyncRange, RangeDataset
from tests.fixtures.values import assert_same
from torch_threadloader import ThreadLoader


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


@pytest.mark.parametrize("num_workers,item_concurrency", [(0, 1), (0, 8), (2, 4), (4, 16)])
def test_coroutines_in_flight_are_bounded_by_workers_times_item_concurrency(num_workers, item_concurrency):
    bound = max(num_workers, 1) * item_concurrency
    ds = AsyncRange(96, delay=0.02)
    # worker_copy="shallow": the copies count in the dataset's one counter
    with ThreadLoader(
        ds, batch_size=16, num_workers=num_workers, item_concurrency=item_concurrency, worker_copy="shallow"
    ) as loader:
        assert sum(len(b) for b in loader) == 96
    assert 1 <= ds.peak <= bound
    if bound <= 16:
        assert ds.peak == bound  # 16 items a batch: the bound is reached


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
