"""Fixtures shared by every test: a thread-leak check around each one. And on a free-threaded
build (3.13t), every skip for a module that cannot be installed there says why
(:data:`NO_FREE_THREADED_WHEEL`), whichever test skipped with ``pytest.importorskip``."""

from __future__ import annotations

import os
import re
import signal
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# A shell that starts a command in the background without job control (``cmd &`` in a script,
# nohup) starts it with SIGINT ignored, and Python then installs no KeyboardInterrupt handler:
# the Ctrl-C tests would wait for ever. They test the handler a terminal's user has.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the default, pyproject's ``addopts``): twice the CPUs this process may run
    on, at most 8 (most of a test's time is waiting on threads, subprocesses and servers);
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` sets it."""
    given = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if given:
        return int(given)
    return min(2 * len(os.sched_getaffinity(0)), 8)


#: How long a thread started by a test may take to exit after the test ends.
THREAD_EXIT_GRACE_S = 2.0

#: Whether this interpreter is a free-threaded build (3.13t, 3.14t).
FREE_THREADED_BUILD = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

#: The test dependencies that cannot be installed on a free-threaded build, and why (checked
#: with ``pip install --dry-run --only-binary=:all:`` on 3.13t: PyYAML, which accelerate,
#: transformers and Lightning need, has no cp313t wheel; neither have ray and cryptography;
#: moto needs cryptography). The tests that need them skip (``pytest.importorskip``, or a
#: ``pytest.skip`` naming the module); there the skip's reason gets this one appended.
NO_FREE_THREADED_WHEEL = {
    "lightning": "Lightning needs PyYAML, which has no free-threaded wheel",
    "accelerate": "accelerate>=1.15 needs PyYAML, which has no free-threaded wheel",
    "transformers": "transformers>=5.24 needs PyYAML, which has no free-threaded wheel",
    "ray": "ray has no free-threaded wheel",
    "moto": "moto needs cryptography, which has no free-threaded wheel",
    "cryptography": "cryptography has no free-threaded wheel",
}


def explained(message: str, free_threaded: bool = FREE_THREADED_BUILD) -> str:
    """A skip's ``message`` with, on a free-threaded build, why the module it names (quoted,
    as ``importorskip`` writes it, or as the first word after "needs") cannot be installed there;
    ``message`` itself where it names none of them or already says so."""
    if not free_threaded or "free-threaded" in message:
        return message
    named = re.findall(r"'([A-Za-z_][\w.]*)'", message) + re.findall(r"\bneeds ([A-Za-z_][\w.]*)", message)
    for module in named:
        why = NO_FREE_THREADED_WHEEL.get(module.split(".")[0])
        if why is not None:
            return f"{message} (not installable on this free-threaded build: {why})"
    return message


def _explain(report: Any) -> None:
    longrepr = getattr(report, "longrepr", None)
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, lineno, message = longrepr
        report.longrepr = (path, lineno, explained(str(message)))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: Any) -> Any:
    """A test module skipped at collection (``importorskip`` at its top) says why."""
    report = yield
    _explain(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    """A test skipped while it runs says why."""
    report = yield
    _explain(report)
    return report


#: A rule for ``no_thread_leak``: of the threads a test started and left alive, those it may leave.
ThreadsRule = Callable[[list[threading.Thread]], list[threading.Thread]]


@pytest.fixture
def threads_left_allowed() -> list[ThreadsRule]:
    """The rules of this test's leak check, none unless a fixture adds one (Ray's ``parked``,
    for the prefetcher threads Ray parks by design): a test may leave no thread."""
    return []


@pytest.fixture(autouse=True)
def no_thread_leak(threads_left_allowed: list[ThreadsRule]) -> Iterator[None]:
    """Fail a test that leaves a thread alive that was not alive before it (other than those a
    rule in ``threads_left_allowed`` lets it leave).

    Threads get a short grace period to finish exiting (polled here, in the test fixture only);
    a thread still alive after it is a leak: its owner's close() did not stop and join it.
    """
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_EXIT_GRACE_S
    while True:
        alive = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        allowed = {t for rule in threads_left_allowed for t in rule(alive)}
        leaked = [t for t in alive if t not in allowed]
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
    from tests.fixtures.pipes import close_graph

    for node in nodes:
        close_graph(node)


@pytest.fixture
def no_child_left() -> Iterator[None]:
    """After the test, no worker process of any ThreadLoader may be left (a loader's
    ``close()``, or the collection of a loader dropped without it, ends them). Applied to the
    modules whose tests start worker processes (``pytestmark``)."""
    yield
    from tests.fixtures.processes import assert_no_child_left

    assert_no_child_left()
