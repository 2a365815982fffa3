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

import datapipes as dp
from tests.helpers_resume import Shards
from tests.states_fcfb4b6 import STATES
from tests.test_resume import as_lists, epochs_of, through_torch_save
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
    make, k = CASES[name]
    with make() as b:
        it = iter(b)
        for _ in range(k if k is not None else len(b)):
            next(it)
        state = b.state_dict()
        del it
    kind = state["config"]["kind"]
    assert type(kind) is str and kind == STATES[name]["state"]["config"]["kind"]
    loaded = through_torch_save(state)  # torch.load(weights_only=True)
    assert loaded == state
    torch.manual_seed(99)
    with make() as c:
        c.load_state_dict(loaded)
        assert as_lists(list(c)) == STATES[name]["rest"]
