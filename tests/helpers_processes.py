"""Fixture datasets for the worker-process tests, named by what they do. At module level, so
that a worker process (forkserver or spawn) can import them."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

from tests.helpers_datasets import SleepsAt as SleepsAt  # its tests import it from here too

CHILD_PREFIX = "threadloader-process"


def loader_children() -> list[Any]:
    """This process's worker processes of any ThreadLoader (``multiprocessing`` tracks them)."""
    return [p for p in multiprocessing.active_children() if p.name.startswith(CHILD_PREFIX)]


def running(pid: int) -> bool:
    """True while ``pid`` runs (``/proc``; a zombie has ended). The children of a forkserver
    are not this process's to ``waitpid``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still running after waiting up to ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if running(pid)]
        if not alive or time.monotonic() >= end:
            return alive
        time.sleep(0.02)


def assert_no_child_left(timeout: float = 5.0) -> None:
    """Fail unless every loader's worker process is gone: those of a loader that is garbage
    but not yet collected are given the collection and ``timeout`` seconds to end."""
    if not loader_children():
        return
    gc.collect()
    left = [p.pid for p in loader_children()]
    assert wait_gone([pid for pid in left if pid is not None], timeout) == [], "a worker process outlived its loader"


def workers_in(mode: str, total: int) -> dict[str, int]:
    """ThreadLoader arguments for ``total`` workers in all: ``total`` threads in this process
    (``mode == "threads"``), or worker processes (``"processes"``): 2 of ``total // 2`` threads
    each when ``total`` is even, else ``total`` processes of one thread. Thread ``t`` of process
    ``c`` is worker ``t * P + c``, so batch ``i`` is loaded by worker ``i % total`` in both, as
    by torch's ``DataLoader(num_workers=total)``."""
    if mode == "threads":
        return {"num_workers": total}
    assert mode == "processes" and total > 0, (mode, total)
    if total % 2 == 0:
        return {"num_workers": total // 2, "worker_processes": 2}
    return {"num_workers": 1, "worker_processes": total}


class Seen(Dataset[torch.Tensor]):
    """Item ``i`` is ``[i, worker id, worker seed % 1000, num_workers]``: the batches show who
    loaded what with which seed."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return torch.tensor([i, -1, -1, 0])
        return torch.tensor([i, info.id, info.seed % 1000, info.num_workers])


class PidOf(Dataset[int]):
    """Item ``i`` is the pid of the process that loaded it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return os.getpid()


class Jittered(Dataset[int]):
    """``ds[i] == i`` after a moment that depends on ``i``: workers finish out of order."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(((i * 7919) % 13) / 13 * 0.003)
        return i


class Unsendable(Exception):
    """An exception that cannot be pickled (it holds a lock)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class FailsAt(Dataset[int]):
    """``ds[i] == i``; index ``bad`` raises ``ValueError``, index ``odd`` raises an exception
    that cannot be pickled."""

    def __init__(self, n: int, bad: int, odd: int = -1) -> None:
        self.n = n
        self.bad = bad
        self.odd = odd

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise ValueError(f"bad item {i}")
        if i == self.odd:
            raise Unsendable(f"odd item {i}")
        return i


class DiesAt(Dataset[int]):
    """``ds[i] == i``; loading index ``at`` ends the process that loads it: ``how`` is
    ``"exit"`` (``os._exit(3)``), ``"kill"`` (SIGKILL) or ``"segfault"`` (a read of address 0,
    as a crashing C extension)."""

    def __init__(self, n: int, at: int, how: str) -> None:
        self.n = n
        self.at = at
        self.how = how

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.at:
            if self.how == "exit":
                os._exit(3)
            elif self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                ctypes.string_at(0)
        return i


class HoldsALock(Dataset[int]):
    """A dataset that cannot be pickled."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return i


class Shards(IterableDataset[int]):
    """``range(n)`` split between workers by ``get_worker_info()``, as torch documents."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            time.sleep(((i * 7919) % 13) / 13 * 0.002)
            yield i


class AsyncSeen(Dataset[torch.Tensor]):
    """``await ds[i]`` is ``[i, worker id]``, after a moment."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, i: int) -> torch.Tensor:
        await asyncio.sleep(((i * 7919) % 13) / 13 * 0.002)
        info = torch.utils.data.get_worker_info()
        return torch.tensor([i, -1 if info is None else info.id])


class Big(Dataset[torch.Tensor]):
    """Item ``i`` is a 64 KiB float tensor filled with ``i``."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((128, 128), float(i))


def init_fails_for_worker_1(worker_id: int) -> None:
    """A ``worker_init_fn`` that raises in worker 1."""
    if worker_id == 1:
        raise KeyError(f"worker {worker_id} cannot start")


class NiceOf(Dataset[int]):
    """Item ``i`` is the nice level of the thread that loads it."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class StreamDiesAt(IterableDataset[int]):
    """``range(n)`` split between workers; the worker that reaches ``at`` ends its process
    (``os._exit(3)``)."""

    def __init__(self, n: int, at: int) -> None:
        self.n = n
        self.at = at

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            if i == self.at:
                os._exit(3)
            yield i


class FailsEvery(Dataset[int]):
    """``ds[i] == i`` after a moment, with its transform timed as a stage; every index that is
    a multiple of ``every`` (0 included) raises ``ValueError``."""

    def __init__(self, n: int, every: int) -> None:
        self.n = n
        self.every = every

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        from torch_threadloader import stage

        time.sleep(((i * 7919) % 13) / 13 * 0.002)
        if i % self.every == 0:
            raise ValueError(f"bad item {i}")
        with stage("transform"):
            return i


def skip_only_value_errors_under_20(index: int, exc: BaseException) -> bool:
    """An ``on_error`` callable: skip a ``ValueError`` of an index below 20, raise the rest."""
    return isinstance(exc, ValueError) and index < 20


class AffinityOf(Dataset[list[int]]):
    """Item ``i`` is the sorted CPU set of the thread that loads it."""

    def __init__(self, n: int = 4) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> list[int]:
        return sorted(os.sched_getaffinity(0))


class FailsWhileFlag(Dataset[torch.Tensor]):
    """``ds[i] == tensor([i])``; while the file ``flag`` exists, indices 2 and 3 take a second
    and index 4 raises ``ValueError`` after 0.2 s (a file, so that the test can change it for a worker
    process)."""

    def __init__(self, flag: str, n: int = 16) -> None:
        self.flag = flag
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if os.path.exists(self.flag):
            if i in (2, 3):
                time.sleep(1.0)
            if i == 4:  # after the batch before it was sent: its record waits in the process
                time.sleep(0.2)
                raise ValueError(f"bad item {i}")
        return torch.tensor([i])


class FailsAtPair(Dataset[torch.Tensor]):
    """``ds[i] == tensor([i])``; indices 4 and 5 (a whole batch of 2) raise ``ValueError``."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> torch.Tensor:
        if i in (4, 5):
            raise ValueError(f"bad item {i}")
        return torch.tensor([i])
