"""A worker process's own parts, run here in the loader's process: the registration of the
async datasets whose ``aclose()`` its loop awaits, from several threads at once (a
check-then-append that the GIL made unlikely to interleave, and a free-threaded build does not),
and the byte budget's books of its epochs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from torch_threadloader.kinds import strategy_of
from torch_threadloader.plan import Kind
from torch_threadloader.processes.child import _Child
from torch_threadloader.processes.messages import Needed, Taken
from torch_threadloader.resources import Resources

THREADS = 8


def by_the_main_thread(resources: Resources) -> Callable[[Any], None]:
    return lambda dataset: strategy_of(Kind.ASYNC).adopt(resources, dataset)


def by_each_copy(resources: Resources) -> Callable[[Any], None]:
    add = strategy_of(Kind.ASYNC).on_copy(resources)
    assert add is not None
    return add


@pytest.mark.parametrize("register", [by_the_main_thread, by_each_copy], ids=["epoch", "on_copy"])
def test_a_dataset_registered_by_many_threads_at_once_is_registered_once(
    register: Callable[[Resources], Callable[[Any], None]],
) -> None:
    resources = Resources(None, 1)
    # Others first: each registration scans them, a window for another thread's append.
    for _ in range(2_000):
        resources.async_datasets.append(object())
    add = register(resources)
    for _ in range(25):
        dataset = object()
        barrier = threading.Barrier(THREADS)

        def run(dataset: object = dataset, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            add(dataset)

        threads = [threading.Thread(target=run, name=f"test-register-{i}") for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(d is dataset for d in resources.async_datasets) == 1
    resources.close(1.0)


def test_a_stopped_epochs_needed_batch_never_replaces_the_next_epochs() -> None:
    """``max_bytes_in_flight``: the parent may still name a batch of an epoch it is stopping
    after the next epoch named its first (another thread took the old epoch's last batch); the
    child keeps the newest epoch's, and that epoch's budget, made later, admits that batch
    past its share."""
    child = object.__new__(_Child)  # only its budget's books: no pipes, no threads
    child.lock = threading.Lock()
    child.budget, child.needed = None, None
    child.budget_news(Needed(epoch=2, number=0))
    child.budget_news(Needed(epoch=1, number=5))  # the stopped epoch's, later on the pipe
    budget = child.open_budget(2, 1)
    child.budget_news(Needed(epoch=1, number=6))  # never reaches epoch 2's budget
    child.budget_news(Taken(epoch=1, number=6))
    budget.admit(3)  # batch 3 reserves the whole share (1 byte)
    admitted = threading.Event()
    admitter = threading.Thread(target=lambda: (budget.admit(0), admitted.set()), daemon=True)
    admitter.start()
    admitter.join(10)
    budget.close()  # wakes it, if it waits
    admitter.join(10)
    assert admitted.is_set() and not budget.report()[1], "batch 0 waited for room: epoch 2 lost its Needed"
