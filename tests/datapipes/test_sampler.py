"""Sampler: torch's own orders, epoch after epoch — sequential, seeded random, any torch
Sampler, distributed — compared with the torch samplers themselves."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

import datapipes as dp

EPOCHS = 3


def sampler_epochs(sampler: object, n: int = EPOCHS) -> list[list[object]]:
    return [list(sampler) for _ in range(n)]  # type: ignore[call-overload]


def test_sequential_over_a_dataset_or_a_length() -> None:
    assert list(dp.Sampler(5)) == [0, 1, 2, 3, 4]
    assert list(dp.Sampler(["a", "b", "c"])) == [0, 1, 2]
    assert list(dp.Sampler(0)) == []
    assert len(dp.Sampler(7)) == 7
    assert sampler_epochs(dp.Sampler(4)) == sampler_epochs(SequentialSampler(range(4)))


@pytest.mark.parametrize("seed", [0, 1, 12345])
@pytest.mark.parametrize("n", [1, 2, 17, 100])
def test_seeded_shuffle_equals_random_sampler_with_that_generator(seed: int, n: int) -> None:
    ds = list(range(n))
    torch_sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
    assert sampler_epochs(dp.Sampler(ds, shuffle=True, seed=seed)) == sampler_epochs(torch_sampler)


def test_shuffle_with_a_generator_uses_and_advances_that_generator() -> None:
    ours = torch.Generator().manual_seed(5)
    theirs = torch.Generator().manual_seed(5)
    sampler = dp.Sampler(30, shuffle=True, generator=ours)
    assert sampler_epochs(sampler) == sampler_epochs(RandomSampler(range(30), generator=theirs))
    assert torch.equal(ours.get_state(), theirs.get_state())


def test_unseeded_shuffle_is_a_new_permutation_each_epoch() -> None:
    sampler = dp.Sampler(50, shuffle=True)
    first, second = sampler_epochs(sampler, 2)
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != second


def test_any_torch_sampler() -> None:
    seq = SequentialSampler(range(10))
    assert sampler_epochs(dp.Sampler(sampler=BatchSampler(seq, 3, drop_last=False))) == sampler_epochs(
        BatchSampler(seq, 3, drop_last=False)
    )
    assert list(dp.Sampler(sampler=BatchSampler(seq, 3, drop_last=True))) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    weights = [0.1, 0.5, 2.0, 0.0, 1.0]
    ours = WeightedRandomSampler(weights, 20, generator=torch.Generator().manual_seed(3))
    theirs = WeightedRandomSampler(weights, 20, generator=torch.Generator().manual_seed(3))
    assert sampler_epochs(dp.Sampler(sampler=ours)) == sampler_epochs(theirs)
    subset_ours = SubsetRandomSampler([2, 4, 6, 8], generator=torch.Generator().manual_seed(9))
    subset_theirs = SubsetRandomSampler([2, 4, 6, 8], generator=torch.Generator().manual_seed(9))
    assert sampler_epochs(dp.Sampler(sampler=subset_ours)) == sampler_epochs(subset_theirs)
    assert list(dp.Sampler(sampler=[3, 1, 2])) == [3, 1, 2]  # any iterable of indices
    assert len(dp.Sampler(sampler=BatchSampler(seq, 4, drop_last=False))) == 3


def test_batch_sampler_over_a_seeded_random_sampler_equals_torch() -> None:
    def make() -> BatchSampler:
        return BatchSampler(RandomSampler(range(23), generator=torch.Generator().manual_seed(2)), 5, False)

    assert sampler_epochs(dp.Sampler(sampler=make())) == sampler_epochs(make())


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    world_size=st.integers(1, 5),
    data=st.data(),
    shuffle=st.booleans(),
    seed=st.integers(0, 1000),
    drop_last=st.booleans(),
)
def test_distributed_equals_distributed_sampler(
    n: int, world_size: int, data: st.DataObject, shuffle: bool, seed: int, drop_last: bool
) -> None:
    rank = data.draw(st.integers(0, world_size - 1))
    ours = dp.Sampler(n, rank=rank, world_size=world_size, shuffle=shuffle, seed=seed, drop_last=drop_last)
    theirs = DistributedSampler(
        range(n), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    for epoch in (0, 1, 7):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(theirs)
        assert len(ours) == len(theirs)


def test_distributed_ranks_cover_the_dataset_with_padding_or_drop_last() -> None:
    n, world = 10, 4
    padded = [list(dp.Sampler(n, rank=r, world_size=world)) for r in range(world)]
    assert all(len(p) == 3 for p in padded)  # ceil(10 / 4), padded by repeating indices
    assert set(itertools.chain(*padded)) == set(range(n))
    dropped = [list(dp.Sampler(n, rank=r, world_size=world, drop_last=True)) for r in range(world)]
    assert all(len(d) == 2 for d in dropped)
    assert len(set(itertools.chain(*dropped))) == 8


def test_set_epoch_changes_the_distributed_order_like_torch() -> None:
    ours = dp.Sampler(50, rank=0, world_size=2, shuffle=True, seed=1)
    theirs = DistributedSampler(range(50), num_replicas=2, rank=0, shuffle=True, seed=1)
    orders = []
    for epoch in range(3):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        orders.append(list(ours))
        assert orders[-1] == list(theirs)
    assert orders[0] != orders[1] != orders[2]
    # Without set_epoch the order repeats, as with torch.
    assert list(ours) == orders[2]


def test_seeded_sampler_batched_equals_batch_sampler_over_random_sampler() -> None:
    ds = list(range(40))
    ours = dp.Sampler(ds, shuffle=True, seed=4).batch(8)
    theirs = BatchSampler(RandomSampler(ds, generator=torch.Generator().manual_seed(4)), 8, drop_last=False)
    assert sampler_epochs(ours) == sampler_epochs(theirs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": 5, "rank": 0}, "world_size"),
        ({"dataset": 5, "world_size": 2}, "rank"),
        ({"dataset": 5, "shuffle": True, "seed": 1, "generator": torch.Generator()}, "seed or generator"),
        ({"dataset": 5, "sampler": [0, 1]}, "sampler"),
        ({}, "dataset"),
        ({"dataset": object()}, "dataset"),
        ({"sampler": 3}, "sampler"),
        ({"dataset": 5, "rank": 0, "world_size": 2, "generator": torch.Generator()}, "seed="),
    ],
)
def test_sampler_refuses_conflicting_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        dp.Sampler(**kwargs)  # type: ignore[arg-type]


def test_distributed_rank_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="rank"):
        dp.Sampler(10, rank=3, world_size=3)


@pytest.mark.parametrize("taken", [1, 5, 21])
def test_an_epoch_ended_early_leaves_the_generator_as_a_whole_epoch_does(taken: int) -> None:
    """torch's RandomSampler draws again when its iterator runs out: the order is drawn whole,
    so the next epoch does not depend on how far this one was read (threads reading ahead)."""
    whole = dp.Sampler(22, shuffle=True, seed=7)
    assert len(list(whole)) == 22
    cut = dp.Sampler(22, shuffle=True, seed=7)
    it = iter(cut)
    first = [next(it) for _ in range(taken)]
    it.close()
    assert first == list(dp.Sampler(22, shuffle=True, seed=7))[:taken]
    assert list(cut) == list(whole)  # the second epoch, the same after either
