"""fast_default_collate gives exactly default_collate's result, or its error."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

from torch_threadloader.collate import fast_default_collate
from tests.loader_helpers import assert_same

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
def test_examples_match_and_tensors_own_resizable_storage(batch):
    got = fast_default_collate(batch)
    assert_same(default_collate(batch), got)
    if isinstance(got, torch.Tensor):
        got.resize_(len(batch) + 3)  # a tensor of its own, like torch's
