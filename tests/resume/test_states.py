"""A state is plain data and outlives the version that took it; a state taken before an epoch's
first batch (k = 0) of a shuffle drawn from torch's global generator resumes as torch's run.

Oracles: ``torch.utils.data.DataLoader`` (the batches of a run from a global seed), and the
states main gave at commit fcfb4b6 (``tests/states_fcfb4b6.py``) with the batches that commit
resumed them to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import datapipes as dp
from tests.fixtures.datasets import AsyncItems, Shards
from tests.fixtures.values import through_torch_save
from tests.resume.test_resume import as_lists, epochs_of
from tests.states_fcfb4b6 import STATES
from torch_threadloader import ThreadLoader

#: The loaders whose states ``tests/states_fcfb4b6.py`` holds, each with the batches taken
#: before its state (``None``: a whole epoch).
CASES: dict[str, tuple[Callable[[], ThreadLoader[Any]], int | None]] = {
    "map": (
        lambda: ThreadLoader(
            list(range(20)), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(7), num_workers=2
        ),
        3,
    ),
    "iterable": (lambda: ThreadLoader(Shards(20), batch_size=3, num_workers=2), 3),
    "node": (lambda: ThreadLoader(dp.Sampler(20).map(abs), batch_size=3), 2),
    "finished": (lambda: ThreadLoader(list(range(10)), batch_size=4), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_state_saved_by_main_at_fcfb4b6_resumes_as_it_did_there(name: str) -> None:
    saved = STATES[name]
    make, _ = CASES[name]
    torch.manual_seed(99)  # as there: the state puts back the generators it holds
    with make() as c:
        c.load_state_dict(saved["state"])
        assert epochs_of(c, 2) == [saved["rest"], saved["next"]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_state_is_plain_data_with_the_kind_as_its_value(name: str) -> None:
    """The state, taken as fcfb4b6 took its own, is that one key for key and in the same order
    (``repr``), but for the kind: its value (``"map"``), not a ``Kind`` member."""
    make, k = CASES[name]
    torch.manual_seed(11)  # as there
    with make() as b:
        it = iter(b)
        for _ in range(k if k is not None else len(b)):
            next(it)
        state = b.state_dict()
        del it
    kind = state["config"]["kind"]
    assert type(kind) is str and kind == STATES[name]["state"]["config"]["kind"]
    there = dict(STATES[name]["state"])
    there["config"] = {**there["config"], "kind": there["config"]["kind"].value}
    assert repr(state) == repr(there)
    loaded = through_torch_save(state)  # torch.load(weights_only=True)
    assert loaded == state
    torch.manual_seed(99)
    with make() as c:
        c.load_state_dict(loaded)
        assert as_lists(list(c)) == STATES[name]["rest"]


def torch_shuffled_epochs(n: int, batch: int, count: int) -> list[list[Any]]:
    """torch's batches of ``count`` epochs of a shuffle drawn from the global generator."""
    loader = torch.utils.data.DataLoader(list(range(n)), batch_size=batch, shuffle=True)
    return [as_lists(list(loader)) for _ in range(count)]


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(9, 40),
    epochs_before=st.integers(0, 2),
    nw=st.sampled_from([0, 2]),
    nw_after=st.sampled_from([0, 2]),
    concurrency_after=st.sampled_from([1, 8]),
    at_iter=st.booleans(),
)
def test_a_state_at_k0_of_an_async_global_shuffle_resumes_as_torchs_run(
    seed: int, n: int, epochs_before: int, nw: int, nw_after: int, concurrency_after: int, at_iter: bool
) -> None:
    """An async dataset, item_concurrency=8, with and without workers, the order
    drawn from torch's global generator (no ``generator=``); after some epochs, a state taken
    before the next epoch's first batch (after ``iter()``, or before it) is loaded by a new
    loader under another global seed: its epochs are torch's (without persistent workers
    torch's order does not depend on ``num_workers``)."""
    batch = 8
    torch.manual_seed(seed)
    want = torch_shuffled_epochs(n, batch, epochs_before + 2)
    torch.manual_seed(seed)
    with ThreadLoader(AsyncItems(n), batch_size=batch, shuffle=True, num_workers=nw, item_concurrency=8) as b:
        assert epochs_of(b, epochs_before) == want[:epochs_before]
        it = iter(b) if at_iter else None
        state = through_torch_save(b.state_dict())
        del it
    torch.manual_seed(seed + 1)
    with ThreadLoader(
        AsyncItems(n), batch_size=batch, shuffle=True, num_workers=nw_after, item_concurrency=concurrency_after
    ) as c:
        c.load_state_dict(state)
        assert epochs_of(c, 2) == want[epochs_before:]
