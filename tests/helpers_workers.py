"""Fixture datasets for tests/loader/test_worker_semantics.py: what a worker sets up and what its items see."""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import threading
from typing import Any, ClassVar

import torch
from torch.utils.data import Dataset, IterableDataset

from torch_threadloader.sample_rng import current_generator

#: Set by ``note_thread_worker`` on the worker's thread, read by ``ThreadLocalSeen``'s items.
thread_state = threading.local()


def note_thread_worker(worker_id: int) -> None:
    """A ``worker_init_fn`` that keeps its worker id in a ``threading.local``."""
    thread_state.worker = worker_id


def _thread_worker() -> int:
    return int(getattr(thread_state, "worker", -1))


class ThreadLocalSeen(Dataset[torch.Tensor]):
    """Item ``i`` is ``[i, worker id, the worker id the thread-local says]``: equal ids mean
    the item ran on the thread its worker's ``worker_init_fn`` ran on."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        return torch.tensor([i, -1 if info is None else info.id, _thread_worker()])


class ThreadLocalStream(IterableDataset[torch.Tensor]):
    """``range(n)`` sharded by worker, each item ``[i, worker id, thread-local worker id]``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        wid, count = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(wid, self.n, count):
            yield torch.tensor([i, wid, _thread_worker()])


class WorkerQueueDataset(Dataset[Any]):
    """torch's ``TestWorkerQueueDataset`` (test/test_dataloader.py): ``worker_init_fn`` is a
    bound method that sets ``self.worker_id``; item ``i`` is ``(self.worker_id, data[i])``."""

    def __init__(self, data: list[int]) -> None:
        self.data = data
        self.worker_id: int | None = None

    def worker_init_fn(self, worker_id: int) -> None:
        self.worker_id = worker_id

    def set_worker(self, worker_id: int, *, offset: int = 0) -> None:
        self.worker_id = worker_id + offset

    def __getitem__(self, item: int) -> tuple[int, int]:
        return -1 if self.worker_id is None else self.worker_id, self.data[item]

    def __len__(self) -> int:
        return len(self.data)


def set_worker_of(dataset: WorkerQueueDataset, worker_id: int, *, offset: int = 0) -> None:
    """A module function taking the dataset: ``functools.partial(set_worker_of, ds)``."""
    dataset.worker_id = worker_id + offset


def set_worker_on(worker_id: int, *, dataset: WorkerQueueDataset, offset: int = 0) -> None:
    """The dataset as a keyword: ``functools.partial(set_worker_on, dataset=ds)``."""
    dataset.worker_id = worker_id + offset


def init_fns(ds: WorkerQueueDataset) -> dict[str, Any]:
    """Every way a ``worker_init_fn`` may hold the dataset, by name."""
    return {
        "bound method": ds.worker_init_fn,
        "partial of a function, dataset as argument": functools.partial(set_worker_of, ds, offset=10),
        "partial of a bound method": functools.partial(ds.set_worker, offset=20),
        "partial, dataset as keyword": functools.partial(set_worker_on, dataset=ds, offset=30),
        "partial of a partial of a bound method": functools.partial(functools.partial(ds.set_worker), offset=40),
    }


class AsyncWorkerQueueDataset(Dataset[Any]):
    """:class:`WorkerQueueDataset` with ``async def __getitem__``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.worker_id: int | None = None
        self.closed = 0

    def worker_init_fn(self, worker_id: int) -> None:
        self.worker_id = worker_id

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, i: int) -> tuple[int, int, int]:
        await asyncio.sleep(0)
        info = torch.utils.data.get_worker_info()
        return -1 if self.worker_id is None else self.worker_id, -1 if info is None else info.id, i


class LockedAsyncDataset(AsyncWorkerQueueDataset):
    """An async dataset holding a lock: ``copy.copy`` copies it (the lock is shared),
    ``copy.deepcopy`` cannot."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.lock = threading.Lock()


class GlobalDraws(Dataset[torch.Tensor]):
    """Item ``i`` is ``[i, torch.rand (global generator), torch.randint, a thread-safe generator's
    draw, the worker rng's random.random() * 1e6]``: the draws a torchvision v2 transform and a
    user's code make inside ``__getitem__`` (without workers, ``random.Random`` seeded from
    ``current_generator()``)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        a = torch.rand(()).item()
        b = torch.randint(0, 1 << 30, ()).item()
        c = torch.rand((), generator=torch.random.thread_safe_generator()).item()
        info = torch.utils.data.get_worker_info()
        if info is not None and info.rng is not None:
            rng = info.rng.random_generator  # the sample's, seeded from current_generator()
        else:  # no workers: no WorkerInfo (torch's answer in the main process); seed one from the sample's
            generator = current_generator()
            rng = random.Random(0 if generator is None else generator.initial_seed())
        return torch.tensor([float(i), a, float(b), c, rng.random() * 1e6], dtype=torch.float64)


class HotObjects(Dataset[int]):
    """A pure-Python dataset over a vocabulary dict and a list of strings (the hot objects a
    worker reads per item); ``self_check`` makes each item say whether they are its copy's own."""

    def __init__(self, n: int, vocab: int = 2000) -> None:
        self.n = n
        self.words = [f"word{j}" for j in range(vocab)]
        self.vocab = {w: j for j, w in enumerate(self.words)}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        total = 0
        for w in self.words[i % 50 : i % 50 + 50]:
            total += self.vocab[w]
        return total

    def ids(self) -> tuple[int, int]:
        return id(self.words), id(self.vocab)


class HotIds(HotObjects):
    """Item ``i`` is the ids of the copy's ``words`` and ``vocab`` (whose objects the worker reads)."""

    def __getitem__(self, i: int) -> Any:
        return torch.tensor(self.ids())


class OwnWords(HotObjects):
    """Item ``i`` says whether the copy's ``words[1]`` (a ``str`` made at run time) is another
    object than the one of the first copy of this dataset in this process (the dataset itself,
    or in a worker process the copy it unpickled): ``copy.deepcopy`` keeps a ``str``, an
    unpickled copy does not. ``lock``: one that cannot be pickled (``copy.copy`` shares it)."""

    _first: ClassVar[dict[int, int]] = {}  # uid -> id(words[1]) of this process's first copy
    _uids = itertools.count()

    def __init__(self, n: int, *, lock: bool = False) -> None:
        super().__init__(n, vocab=60)
        self.uid = next(OwnWords._uids)
        OwnWords._first[self.uid] = id(self.words[1])
        if lock:
            self.lock = threading.Lock()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        OwnWords._first.setdefault(self.uid, id(self.words[1]))

    def __getitem__(self, i: int) -> Any:
        return torch.tensor([i, int(id(self.words[1]) != OwnWords._first[self.uid])])
