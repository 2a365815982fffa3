"""A worker process's own parts, run here in the loader's process: the registration of the
async datasets whose ``aclose()`` its loop awaits, from several threads at once (issue 21:
a check-then-append that the GIL made unlikely to interleave, and a free-threaded build does not)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from torch_threadloader.graph import Resources
from torch_threadloader.processes.child_parts import add_async_dataset, async_dataset_adder

THREADS = 8


def by_the_main_thread(resources: Resources) -> Callable[[Any], None]:
    return lambda dataset: add_async_dataset(resources, dataset)


@pytest.mark.parametrize("register", [by_the_main_thread, async_dataset_adder], ids=["epoch", "on_copy"])
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
