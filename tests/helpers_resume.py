"""Fixture datasets for the resume tests (``tests/resume/test_resume.py``), named by what they do. At
module level, in a module that imports no test framework, so that a worker process imports
them quickly; none holds a lock of its own (``Items.lock`` is the class's), so they pickle."""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

N = 23  # samples: batches of 4 leave a short last one


def jitter(i: int) -> float:
    return random.Random(i * 7919 + time.perf_counter_ns() % 97).random() * 0.002


class Items(Dataset[int]):
    """Item ``i`` is ``i``, after a random moment; counts every ``__getitem__`` call (in the
    process that loads it)."""

    lock = threading.Lock()  # the class's: a dataset pickles to worker processes

    def __init__(self, n: int = N) -> None:
        self.n = n
        self.calls: Counter[int] = Counter()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.calls[i] += 1
        time.sleep(jitter(i))
        return i


class AsyncItems(Items):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        with self.lock:
            self.calls[i] += 1
        await asyncio.sleep(jitter(i))
        return i


class SharedCalls(Items):
    """``Items`` that count the calls in shared memory, which worker processes write too."""

    def __init__(self, n: int = N) -> None:
        super().__init__(n)
        self.counts = multiprocessing.get_context("spawn").Array("i", n)

    def __getitem__(self, i: int) -> int:
        with self.counts.get_lock():
            self.counts[i] += 1
        time.sleep(jitter(i))
        return i

    def loaded(self) -> dict[int, int]:
        """How many times each sample loaded at least once was loaded, in any process."""
        return {i: n for i, n in enumerate(self.counts[:]) if n}


class Shards(IterableDataset[int]):
    """``range(n)`` split between workers by ``get_worker_info()``, as torch documents."""

    def __init__(self, n: int = N) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            time.sleep(jitter(i))
            yield i


class StatefulShards(Shards):
    """The same, keeping its own position (torch's ``Stateful`` protocol), and counting the
    epochs its iterator ended: item ``i + per_epoch * epoch``."""

    def __init__(self, n: int = N, per_epoch: int = 0) -> None:
        super().__init__(n)
        self.per_epoch = per_epoch
        self.position = 0
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        mine = list(range(start, self.n, step))
        while self.position < len(mine):
            i = mine[self.position]
            self.position += 1
            time.sleep(jitter(i))
            yield i + self.per_epoch * self.epoch
        self.position = 0
        self.epoch += 1

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position, self.epoch = int(state["position"]), int(state["epoch"])


class Seeds(Items):
    """Item ``i`` is the seed of the worker loading it."""

    def __getitem__(self, i: int) -> int:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        return info.seed


class Failing(Items):
    """``Items`` whose sample 5 raises."""

    def __getitem__(self, i: int) -> int:
        if i == 5:
            raise ValueError("bad sample 5")
        return super().__getitem__(i)


class Versioned(Items):
    """``Items`` with torch's ``Stateful`` protocol: a version number."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.version = int(state["version"])


class WorkerSeeds(Items):
    """Item ``i`` is ``(i, the seed of the worker loading it)``."""

    def __getitem__(self, i: int) -> Any:  # type: ignore[override]
        info = torch.utils.data.get_worker_info()
        return [i, info.seed if info is not None else -1]


class SlowAt(Items):
    """``Items`` whose samples in ``slow`` take half a second: their batch comes last."""

    def __init__(self, slow: set[int]) -> None:
        super().__init__()
        self.slow = slow

    def __getitem__(self, i: int) -> int:
        if i in self.slow:
            time.sleep(0.5)
        return super().__getitem__(i)


class FailsAt(IterableDataset[int]):
    """``range(16)`` whose iterator raises at 5 and goes on after it."""

    def __iter__(self) -> Iterator[int]:
        return _Failing()


class _Failing:
    def __init__(self) -> None:
        self.i = 0

    def __iter__(self) -> _Failing:
        return self

    def __next__(self) -> int:
        i = self.i
        self.i += 1
        if i >= 16:
            raise StopIteration
        if i == 5:
            raise ValueError("record 5")
        return i


class EagerSampler(torch.utils.data.Sampler[int]):
    """Draws its whole order in ``__iter__`` (not at the first ``next()``), from ``generator``
    (torch's global one when ``None``)."""

    def __init__(self, n: int, generator: torch.Generator | None) -> None:
        self.n = n
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.n, generator=self.generator).tolist())

    def __len__(self) -> int:
        return self.n


class EagerBatches(torch.utils.data.Sampler[list[int]]):
    """A batch sampler that draws every batch in ``__iter__``."""

    def __init__(self, n: int, batch_size: int, generator: torch.Generator) -> None:
        self.n, self.batch_size, self.generator = n, batch_size, generator

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(self.n, generator=self.generator).tolist()
        return iter([order[i : i + self.batch_size] for i in range(0, self.n, self.batch_size)])

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)


class GeneratorSampler(torch.utils.data.Sampler[int]):
    """A Stateful sampler whose own state is its (private) generator's, a tensor."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self._generator = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.n, generator=self._generator).tolist())

    def __len__(self) -> int:
        return self.n

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._generator.set_state(state["generator"])


class NoisyStream(IterableDataset[int]):
    """A Stateful IterableDataset whose items draw from its own generator (its state holds the
    generator's, a tensor)."""

    def __init__(self, n: int = 20) -> None:
        self.n = n
        self.generator = torch.Generator().manual_seed(3)
        self.position = 0

    def __iter__(self) -> Iterator[int]:
        while self.position < self.n:
            self.position += 1
            yield self.position * 1000 + int(torch.randint(100, (), generator=self.generator))
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        self.generator.set_state(state["generator"])


class OwnAndGlobal(torch.utils.data.Sampler[int]):
    """Draws its order in ``__iter__`` from ``generator``, then rotates it by a draw from
    torch's global generator."""

    def __init__(self, n: int, generator: torch.Generator) -> None:
        self.n = n
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.n, generator=self.generator).tolist()
        r = int(torch.randint(self.n, ()))
        return iter(order[r:] + order[:r])

    def __len__(self) -> int:
        return self.n


class CountedBatches(torch.utils.data.Sampler[list[int]]):
    """A Stateful batch sampler whose order is drawn from how many times ``iter()`` was
    called (torch calls it twice an epoch with workers)."""

    def __init__(self, n: int, batch_size: int) -> None:
        self.n, self.batch_size, self.calls = n, batch_size, 0

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(100 + self.calls)).tolist()
        self.calls += 1
        return iter([order[i : i + self.batch_size] for i in range(0, self.n, self.batch_size)])

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])


class EpochStream(StatefulShards):
    """A Stateful IterableDataset that counts its epochs (its copies' counters go on only where
    the copies live on: no workers, persistent workers): item ``i + 100 * epoch``."""

    def __init__(self, n: int = 10) -> None:
        super().__init__(n, per_epoch=100)
