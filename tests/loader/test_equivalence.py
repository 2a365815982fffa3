"""ThreadLoader yields exactly torch.utils.data.DataLoader's batches (the oracle), in both
modes: threads in this process, and worker processes (``worker_processes``) that each run the
thread graph. The process-mode cases draw fewer examples: each starts its processes. What
process mode does not do (a datapipes graph as the dataset) is tested in process only."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, WeightedRandomSampler

from tests.fixtures.datasets import (
    GetItemsDataset,
    RichDataset,
    Shards,
    UnevenStream,
    UnshardedStream,
    sum_ints_and_strings,
)
from tests.fixtures.processes import workers_in
from tests.fixtures.values import assert_same
from torch_threadloader import ThreadLoader

pytestmark = pytest.mark.usefixtures("no_child_left")

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROCESS_SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODES = ["threads", "processes"]


def epochs(loader, n_epochs=2):
    return [list(loader) for _ in range(n_epochs)]


def oracle_and_threads(dataset_factory, seed, **kwargs):
    """Both loaders over fresh datasets, with generators seeded alike; two epochs each."""
    thread_kwargs = {k: kwargs.pop(k) for k in ("item_concurrency", "num_workers", "worker_processes") if k in kwargs}
    ref = epochs(DataLoader(dataset_factory(), generator=torch.Generator().manual_seed(seed), **kwargs))
    with ThreadLoader(
        dataset_factory(), generator=torch.Generator().manual_seed(seed), **kwargs, **thread_kwargs
    ) as loader:
        got = epochs(loader)
    return ref, got


@SETTINGS
@given(
    n=st.integers(1, 40),
    batch_size=st.one_of(st.none(), st.integers(1, 7)),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    num_workers=st.integers(0, 4),
    item_concurrency=st.integers(1, 4),
    in_order=st.just(True),
    seed=st.integers(0, 2**31),
)
def test_map_style_batches_match_dataloader(
    n, batch_size, shuffle, drop_last, num_workers, item_concurrency, in_order, seed
):
    check_map_style(n, batch_size, shuffle, drop_last, item_concurrency, seed, num_workers=num_workers)


@pytest.mark.slow  # worker processes per example: the full tier (CI) runs it
@PROCESS_SETTINGS
@given(
    n=st.integers(1, 40),
    batch_size=st.one_of(st.none(), st.integers(1, 7)),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    num_workers=st.integers(0, 2),
    worker_processes=st.integers(1, 2),
    item_concurrency=st.integers(1, 4),
    seed=st.integers(0, 2**31),
)
def test_map_style_batches_match_dataloader_in_processes(
    n, batch_size, shuffle, drop_last, num_workers, worker_processes, item_concurrency, seed
):
    check_map_style(
        n,
        batch_size,
        shuffle,
        drop_last,
        item_concurrency,
        seed,
        num_workers=num_workers,
        worker_processes=worker_processes,
    )


def check_map_style(n, batch_size, shuffle, drop_last, item_concurrency, seed, **workers):
    if batch_size is None:
        drop_last = False
    ref, got = oracle_and_threads(
        lambda: RichDataset(n),
        seed,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        item_concurrency=item_concurrency,
        **workers,
    )
    assert_same(ref, got)


@SETTINGS
@given(
    n=st.integers(1, 30),
    batch_size=st.integers(1, 6),
    num_workers=st.integers(0, 4),
    seed=st.integers(0, 2**31),
    kind=st.sampled_from(["sequential", "random_replacement", "weighted", "batch_sampler"]),
)
def test_samplers_and_batch_samplers_match_dataloader(n, batch_size, num_workers, seed, kind):
    check_sampler(n, batch_size, seed, kind, num_workers=num_workers)


@pytest.mark.slow  # worker processes per example: the full tier (CI) runs it
@PROCESS_SETTINGS
@given(
    n=st.integers(1, 30),
    batch_size=st.integers(1, 6),
    num_workers=st.integers(0, 2),
    worker_processes=st.integers(1, 2),
    seed=st.integers(0, 2**31),
    kind=st.sampled_from(["sequential", "random_replacement", "weighted", "batch_sampler"]),
)
def test_samplers_and_batch_samplers_match_dataloader_in_processes(
    n, batch_size, num_workers, worker_processes, seed, kind
):
    check_sampler(n, batch_size, seed, kind, num_workers=num_workers, worker_processes=worker_processes)


def check_sampler(n, batch_size, seed, kind, **workers):
    """The sampler stays in the loader's process (in process mode too): it draws as torch's."""

    def make_kwargs():
        g = torch.Generator().manual_seed(seed + 1)
        if kind == "sequential":
            return {"sampler": SequentialSampler(range(n)), "batch_size": batch_size}
        if kind == "random_replacement":
            return {
                "sampler": RandomSampler(range(n), replacement=True, num_samples=n + 3, generator=g),
                "batch_size": batch_size,
            }
        if kind == "weighted":
            return {
                "sampler": WeightedRandomSampler([1.0 + i % 3 for i in range(n)], n, generator=g),
                "batch_size": batch_size,
            }
        return {"batch_sampler": BatchSampler(RandomSampler(range(n), generator=g), batch_size, drop_last=False)}

    ref = list(DataLoader(RichDataset(n), **make_kwargs()))
    with ThreadLoader(RichDataset(n), **workers, **make_kwargs()) as loader:
        got = list(loader)
    assert_same(ref, got)


@pytest.mark.parametrize("mode", MODES)
def test_global_rng_shuffle_matches_dataloader(mode):
    """Without a generator, both draw the epoch's base seed and permutation from torch's global RNG."""
    torch.manual_seed(123)
    ref = epochs(DataLoader(RichDataset(20), batch_size=4, shuffle=True), 3)
    torch.manual_seed(123)
    with ThreadLoader(RichDataset(20), batch_size=4, shuffle=True, **workers_in(mode, 2)) as loader:
        got = epochs(loader, 3)
    assert_same(ref, got)


@pytest.mark.parametrize("mode", MODES)
def test_getitems_is_used_like_torch(mode):
    ref_ds, ds = GetItemsDataset(10), GetItemsDataset(10)
    ref = list(DataLoader(ref_ds, batch_size=4))
    # worker_copy="shallow": worker threads record their batches in the dataset's list
    with ThreadLoader(ds, batch_size=4, item_concurrency=3, worker_copy="shallow", **workers_in(mode, 2)) as loader:
        got = list(loader)
    assert_same(ref, got)  # __getitems__ gives i * 10, __getitem__ i
    assert sorted(ref_ds.batches) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    if mode == "threads":  # a worker process records in its own copy of the dataset
        assert sorted(ds.batches) == sorted(ref_ds.batches)
        assert ds.calls == 0  # __getitem__ never called


@pytest.mark.parametrize("mode", MODES)
def test_custom_collate_fn_matches(mode):
    collate = sum_ints_and_strings  # at module level: a worker process imports it
    ref = list(DataLoader(RichDataset(11), batch_size=3, collate_fn=collate))
    with ThreadLoader(RichDataset(11), batch_size=3, collate_fn=collate, **workers_in(mode, 3)) as loader:
        assert_same(ref, list(loader))


@pytest.mark.parametrize("mode", MODES)
def test_unordered_yields_the_same_batches_in_some_order(mode):
    ref = list(DataLoader(RichDataset(30), batch_size=4))
    with ThreadLoader(RichDataset(30), batch_size=4, in_order=False, **workers_in(mode, 3)) as loader:
        got = list(loader)
    key = lambda b: b["int"][0].item()  # noqa: E731
    assert_same(sorted(ref, key=key), sorted(got, key=key))


@pytest.mark.parametrize("mode", MODES)
def test_return_indices_pairs_each_batch_with_its_indices(mode):
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    ref_indices = [b["int"].tolist() for b in DataLoader(RichDataset(9), batch_size=4, shuffle=True, generator=g1)]
    with ThreadLoader(
        RichDataset(9), batch_size=4, shuffle=True, generator=g2, return_indices=True, **workers_in(mode, 2)
    ) as loader:
        pairs = list(loader)
    assert [p[0] for p in pairs] == ref_indices
    for indices, batch in pairs:
        assert batch["int"].tolist() == indices


@settings(max_examples=15, deadline=None)
@given(
    num_workers=st.integers(0, 4),
    batch_size=st.one_of(st.none(), st.integers(1, 5)),
    drop_last=st.booleans(),
    kind=st.sampled_from([functools.partial(Shards, pause=None), UnshardedStream]),
    n=st.integers(0, 25),
)
def test_iterable_dataset_sharding_matches_dataloader(num_workers, batch_size, drop_last, kind, n):
    """Sharded through worker info exactly as torch shards per process, duplication included."""
    check_sharding(num_workers, batch_size, drop_last, kind, n, num_workers=num_workers)


@pytest.mark.slow  # worker processes per example: the full tier (CI) runs it
@settings(max_examples=10, deadline=None)
@given(
    num_workers=st.integers(0, 2),
    worker_processes=st.integers(1, 2),
    batch_size=st.one_of(st.none(), st.integers(1, 5)),
    drop_last=st.booleans(),
    kind=st.sampled_from([functools.partial(Shards, pause=None), UnshardedStream]),
    n=st.integers(0, 25),
)
def test_iterable_dataset_sharding_matches_dataloader_in_processes(
    num_workers, worker_processes, batch_size, drop_last, kind, n
):
    """P processes of n threads are torch's P * max(n, 1) workers."""
    total = worker_processes * max(num_workers, 1)
    check_sharding(total, batch_size, drop_last, kind, n, num_workers=num_workers, worker_processes=worker_processes)


def check_sharding(torch_workers, batch_size, drop_last, kind, n, **workers):
    if batch_size is None:
        drop_last = False
    ref = list(
        DataLoader(
            kind(n),
            batch_size=batch_size,
            drop_last=drop_last,
            num_workers=torch_workers,
            multiprocessing_context="fork" if torch_workers else None,
        )
    )
    with ThreadLoader(kind(n), batch_size=batch_size, drop_last=drop_last, **workers) as loader:
        got = list(loader)
    assert_same(ref, got)


@pytest.mark.parametrize("mode", MODES)
def test_iterable_workers_ending_at_different_times_interleave_like_torch(mode):
    for num_workers in (2, 3, 4):  # processes: 2 of 1 thread, 3 of 1, 2 of 2
        ref = list(DataLoader(UnevenStream(), batch_size=2, num_workers=num_workers))
        with ThreadLoader(UnevenStream(), batch_size=2, **workers_in(mode, num_workers)) as loader:
            got = list(loader)
        assert_same(ref, got)


@pytest.mark.parametrize("workers", [{}, {"num_workers": 1, "worker_processes": 2}], ids=["threads", "processes"])
def test_len_matches(workers):
    for kwargs in ({"batch_size": 3}, {"batch_size": 3, "drop_last": True}, {"batch_size": None}):
        with ThreadLoader(RichDataset(10), **kwargs, **workers) as loader:
            assert len(loader) == len(DataLoader(RichDataset(10), **kwargs))
            assert len(iter(loader)) == len(loader)


def test_a_datapipes_graph_is_iterated_once_per_epoch():
    import datapipes as dp

    def graph():
        return dp.Sampler(23).map(lambda i: i * 2, num_threads=3)

    ref = list(DataLoader(graph(), batch_size=4))
    for num_workers in (0, 1, 3):
        with ThreadLoader(graph(), batch_size=4, num_workers=num_workers) as loader:
            assert_same(ref, list(loader))
            assert_same(ref, list(loader))  # a second epoch
