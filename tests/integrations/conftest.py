"""Fixtures every framework test shares."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def fresh_accelerate_state() -> Iterator[None]:
    """accelerate keeps its process state in singletons: each test starts from none (a module
    that never imported accelerate has nothing to reset)."""
    yield
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(True)
        state.PartialState._reset_state()
        state.GradientState._reset_state()
