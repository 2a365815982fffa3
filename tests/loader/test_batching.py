"""FastBatches cuts exactly BatchSampler's batches."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from torch_threadloader.batching import FastBatches, fast_batches


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(0, 50),
    size=st.integers(1, 9),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_same_batches_as_batch_sampler(n, size, drop_last, shuffle, seed):
    def make():
        if shuffle and n:
            return BatchSampler(RandomSampler(range(n), generator=torch.Generator().manual_seed(seed)), size, drop_last)
        return BatchSampler(SequentialSampler(range(n)), size, drop_last)

    ref, fast = make(), fast_batches(make())
    assert isinstance(fast, FastBatches)
    for _ in range(2):  # two epochs: the generator advances alike
        assert list(fast) == list(ref)
    assert len(fast) == len(ref)


def test_subclasses_and_other_samplers_are_left_as_they_are():
    class MyBatches(BatchSampler):
        pass

    custom = MyBatches(SequentialSampler(range(4)), 2, False)
    assert fast_batches(custom) is custom
    plain = [[0, 1], [2]]
    assert fast_batches(plain) is plain
