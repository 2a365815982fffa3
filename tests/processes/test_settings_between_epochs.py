"""``worker_processes=P``: a setting changed between epochs is used from the next ``iter()``,
as in process: the worker processes started with the old value are replaced, and the epoch
after the change gives what a new loader built with the new value gives."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
from torch.utils.data import Dataset

from tests.fixtures.values import plain
from torch_threadloader import ThreadLoader
from torch_threadloader.worker_info import get_worker_info

pytestmark = pytest.mark.usefixtures("no_child_left")


class Probe(Dataset[tuple[int, ...]]):
    """Item ``i``: ``(i, worker id, num_workers, nice level, CPU mask)`` of the thread that
    loads it; item 0 waits ``slow_first`` seconds first."""

    def __init__(self, slow_first: float = 0.0) -> None:
        self.slow_first = slow_first

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[int, ...]:
        if i == 0 and self.slow_first:
            time.sleep(self.slow_first)
        info = get_worker_info()
        assert info is not None
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        mask = sum(1 << cpu for cpu in os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
        return (i, info.id, info.num_workers, nice, mask)


def epoch(loader: ThreadLoader[Any]) -> list[Any]:
    return [plain(b) for b in loader]


def affinity_change() -> tuple[Any, Any]:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        pytest.skip("process_affinity needs two CPUs to change between")
    return None, [cpus[-1]]


#: setting -> (the value the loader is built with, the value set after its first epoch).
CHANGES: dict[str, tuple[Any, Any]] = {
    "num_workers": (1, 2),
    "return_indices": (False, True),
    "process_nice": (0, 5),
}


@pytest.mark.parametrize("name", [*CHANGES, "process_affinity"])
def test_the_epoch_after_a_change_is_a_new_loaders(name: str) -> None:
    before, after = CHANGES[name] if name in CHANGES else affinity_change()
    loader = ThreadLoader(Probe(), batch_size=2, worker_processes=2, **{name: before})
    fresh = ThreadLoader(Probe(), batch_size=2, worker_processes=2, **{name: after})
    try:
        first = epoch(loader)
        setattr(loader, name, after)
        second = epoch(loader)
        expected = epoch(fresh)
    finally:
        loader.close()
        fresh.close()
    assert second == expected
    assert second != first  # the change shows in the batches


def test_in_order_false_set_between_epochs_hands_out_as_finished() -> None:
    loader = ThreadLoader(Probe(slow_first=0.5), batch_size=2, worker_processes=2)
    try:
        assert [b[0][0] for b in epoch(loader)] == [0, 2, 4, 6]
        loader.in_order = False
        second = epoch(loader)
    finally:
        loader.close()
    assert sorted(b[0][0] for b in second) == [0, 2, 4, 6]
    assert second[0][0][0] != 0  # the slow batch 0 no longer holds up the others


def test_max_bytes_in_flight_set_between_epochs_bounds_the_processes() -> None:
    loader = ThreadLoader(Probe(), batch_size=2, worker_processes=2)
    fresh = ThreadLoader(Probe(), batch_size=2, worker_processes=2, max_bytes_in_flight=1 << 20)
    try:
        epoch(loader)
        loader.max_bytes_in_flight = 1 << 20
        epoch(loader)
        epoch(fresh)
        budget, expected = loader.stats()["budget"], fresh.stats()["budget"]
    finally:
        loader.close()
        fresh.close()
    assert budget["limit"] == expected["limit"] == 1 << 20
    assert budget["peak"] > 0 and expected["peak"] > 0  # the processes charged their share


def test_an_unchanged_setting_keeps_the_processes() -> None:
    loader = ThreadLoader(Probe(), batch_size=2, worker_processes=2, num_workers=1)
    try:
        epoch(loader)
        pids = [c.pid for c in loader._state.kept.processes.children]
        loader.timeout = 30  # read by the loader's process only
        loader.num_workers = 1
        epoch(loader)
        assert [c.pid for c in loader._state.kept.processes.children] == pids
        loader.num_workers = 2
        epoch(loader)
        assert not {c.pid for c in loader._state.kept.processes.children} & set(pids)
    finally:
        loader.close()


def test_a_change_while_an_epoch_is_open_retires_its_processes_when_it_ends() -> None:
    loader = ThreadLoader(Probe(), batch_size=2, worker_processes=2, num_workers=1)
    fresh = ThreadLoader(Probe(), batch_size=2, worker_processes=2, num_workers=2)
    unchanged = ThreadLoader(Probe(), batch_size=2, worker_processes=2, num_workers=1)
    try:
        open_epoch = iter(loader)
        first = plain(next(open_epoch))
        old = loader._state.kept.processes
        loader.num_workers = 2
        assert epoch(loader) == epoch(fresh)
        assert not old.closed  # still the open epoch's
        rest = [plain(b) for b in open_epoch]
        assert [first, *rest] == epoch(unchanged)
        assert old.closed  # let go by the epoch that held it: stopped
    finally:
        loader.close()
        fresh.close()
        unchanged.close()
