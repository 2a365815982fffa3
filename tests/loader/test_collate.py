"""fast_default_collate gives exactly default_collate's result, or its error."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

from tests.fixtures.values import assert_same
from torch_threadloader.collate import fast_default_collate

numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.booleans(),
)


def outcome(fn, batch):
    try:
        return fn(batch)
    except Exception as exc:  # the same error type is part of the contract
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(numbers, min_size=1, max_size=40))
def test_same_result_as_default_collate(batch):
    ref, got = outcome(default_collate, batch), outcome(fast_default_collate, batch)
    if isinstance(ref, torch.Tensor):
        assert_same(ref, got)
    else:
        assert ref is got


@pytest.mark.parametrize("batch", [[1, 2, 3], [0.5, 1.5], [True, False], [1, 2.5], [1.0, 2], ["a"], [{"x": 1}]])
def test_examples_match(batch):
    assert_same(default_collate(batch), fast_default_collate(batch))


def test_number_batches_share_pin_and_pickle_like_torchs():
    import pickle

    got = fast_default_collate(list(range(5)))
    assert torch.equal(pickle.loads(pickle.dumps(got)), got)
    got.share_memory_()  # e.g. to cross a torch.multiprocessing queue
    assert got.is_shared() and got.tolist() == [0, 1, 2, 3, 4]
    got += 1  # writable
    assert got.tolist() == [1, 2, 3, 4, 5]
