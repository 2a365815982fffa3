"""The ``mode`` the tests of worker processes run in: :data:`~tests.fixtures.processes.W`
threads, or worker processes of as many threads in all."""

from __future__ import annotations

import pytest

from tests.fixtures.processes import BOTH_MODES


@pytest.fixture(params=sorted(BOTH_MODES))
def mode(request: pytest.FixtureRequest) -> dict[str, int]:
    """ThreadLoader arguments for one of the two modes (the test runs in each)."""
    return BOTH_MODES[request.param]
