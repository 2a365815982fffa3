"""Fixtures shared by every test: a thread-leak check around each one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

#: How long a thread started by a test may take to exit after the test ends.
THREAD_EXIT_GRACE_S = 2.0


@pytest.fixture(autouse=True)
def no_thread_leak() -> Iterator[None]:
    """Fail a test that leaves a thread alive that was not alive before it.

    Threads get a short grace period to finish exiting (polled here, in the test fixture only);
    a thread still alive after it is a leak: its owner's close() did not stop and join it.
    """
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_EXIT_GRACE_S
    while True:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not leaked or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if leaked:
        pytest.fail(f"test left {len(leaked)} thread(s) running: {sorted(t.name for t in leaked)}")


@pytest.fixture
def close_after() -> Iterator[list[Any]]:
    """A list to append datapipes nodes to; after the test, the event-loop thread of every
    AsyncFetcher in their graphs (kept across epochs by the node) is closed."""
    nodes: list[Any] = []
    yield nodes
    from tests.helpers_datapipes import close_graph

    for node in nodes:
        close_graph(node)


@pytest.fixture
def no_child_left() -> Iterator[None]:
    """After the test, no worker process of any ThreadLoader may be left (a loader's
    ``close()``, or the collection of a loader dropped without it, ends them). Applied to the
    modules whose tests start worker processes (``pytestmark``)."""
    yield
    from tests.helpers_processes import assert_no_child_left

    assert_no_child_left()
