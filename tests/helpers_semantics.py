"""Fixtures for the worker-semantics and lifecycle specs, named by what they do.

Every dataset here is a module-level class, so torch's worker processes (the oracle) and
``pickle`` can use it. Datasets that record what they saw return it in the item, so the same
dataset works in a worker process and in a thread.
"""

from __future__ import annotations

import asyncio
import gc
import math
import multiprocessing
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

# -- observing threads ------------------------------------------------------------------------


def loader_threads() -> list[str]:
    """Names of the live threads a ThreadLoader owns (all named ``threadloader*``)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("threadloader") and t.is_alive())


def wait_for_no_loader_threads(grace_s: float = 3.0) -> list[str]:
    """Poll (in the test only) until no loader thread is alive, or ``grace_s`` passed; the survivors."""
    deadline = time.monotonic() + grace_s
    while loader_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    return loader_threads()


def patch_join_timeout(setattr_fn: Callable[[Any, str, Any], None], value: float) -> None:
    """Set ``DEFAULT_JOIN_TIMEOUT`` to ``value`` in every loaded module of the two packages
    that has it (the spec: ``close()`` reads the join timeout when it runs)."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "datapipes" or name.startswith(("datapipes.", "torch_threadloader"))):
            continue
        if hasattr(module, "DEFAULT_JOIN_TIMEOUT"):
            setattr_fn(module, "DEFAULT_JOIN_TIMEOUT", value)


def torch_epochs(dataset: Any, n_epochs: int, **kwargs: Any) -> list[list[Any]]:
    """``n_epochs`` epochs of torch's DataLoader (the oracle), its workers shut down after."""
    loader = DataLoader(dataset, **kwargs)
    out = [list(loader) for _ in range(n_epochs)]
    del loader
    gc.collect()
    return out


def thread_epochs(dataset: Any, n_epochs: int, **kwargs: Any) -> list[list[Any]]:
    from torch_threadloader import ThreadLoader

    with ThreadLoader(dataset, **kwargs) as loader:
        return [list(loader) for _ in range(n_epochs)]


def plain(batches: Any) -> Any:
    """Tensors to lists, recursively, for comparisons and readable failures."""
    if isinstance(batches, torch.Tensor):
        return batches.tolist()
    if isinstance(batches, dict):
        return {k: plain(v) for k, v in batches.items()}
    if isinstance(batches, (list, tuple)):
        return [plain(b) for b in batches]
    return batches


class InitCounter:
    """A ``worker_init_fn`` that counts its calls in shared memory: seen from torch's forked
    workers and from worker processes (its ``spawn``-context value pickles to them)."""

    def __init__(self) -> None:
        self.value = multiprocessing.get_context("spawn").Value("i", 0)

    def __call__(self, worker_id: int) -> None:
        with self.value.get_lock():
            self.value.value += 1


def keep_items(items: list[Any]) -> list[Any]:
    """A ``collate_fn`` that keeps a batch's items as they are."""
    return items


def mark_init(worker_id: int) -> None:
    """A ``worker_init_fn`` that records its worker in the ``inited`` set of its dataset copy
    (:class:`InitSeen`; a shallow copy shares the set of the dataset it was copied from)."""
    info = torch.utils.data.get_worker_info()
    info.dataset.inited.add(worker_id)


# -- datasets ---------------------------------------------------------------------------------


class InitSeen(Dataset):
    """Per item: ``(index, worker id, thread_safe_generator() is the worker's generator,
    mark_init ran for that worker)``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.inited: set[int] = set()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, int, bool, bool]:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return i, -1, False, False
        generator = torch.random.thread_safe_generator()
        return i, info.id, generator is not None and generator is info.rng.torch_generator, info.id in self.inited


class WorkerSeen(Dataset):
    """``ds[i] == {"index": i, "id": worker id, "seed": worker seed}`` (-1 outside a worker)."""

    def __init__(self, n: int, jitter_s: float = 0.0) -> None:
        self.n = n
        self.jitter_s = jitter_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, int]:
        if self.jitter_s:
            time.sleep(random.Random().random() * self.jitter_s)  # timing noise, not seeded
        info = torch.utils.data.get_worker_info()
        return {"index": i, "id": -1 if info is None else info.id, "seed": -1 if info is None else info.seed}


class Range(Dataset):
    """``ds[i] == i``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class JitteredDraws(Dataset):
    """``ds[i] == (i, a draw from the worker's thread-safe generator)`` after a random sleep.

    In a worker *process* ``thread_safe_generator()`` is None, so the draw comes from the
    process's global generator, which torch seeds with the worker's seed; in a thread worker
    it is the worker's own generator, seeded with the same seed. The draws of worker ``w``
    depend only on which items ``w`` loads and in what order, never on timing."""

    def __init__(self, n: int, jitter_s: float = 0.01) -> None:
        self.n = n
        self.jitter_s = jitter_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, int]:
        time.sleep(random.Random().random() * self.jitter_s)
        draw = torch.randint(0, 2**30, (1,), generator=torch.random.thread_safe_generator()).item()
        return i, int(draw)


class WorkerRngDraws(Dataset):
    """``ds[i] == a draw from get_worker_info().rng.torch_generator`` after a random sleep."""

    def __init__(self, n: int, jitter_s: float = 0.01) -> None:
        self.n = n
        self.jitter_s = jitter_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(random.Random().random() * self.jitter_s)
        info = torch.utils.data.get_worker_info()
        return int(torch.randint(0, 2**30, (1,), generator=info.rng.torch_generator).item())


class StartEndStream(IterableDataset):
    """torch's documented example (``torch.utils.data.IterableDataset``): yields
    ``range(start, end)``; :func:`split_start_end` shards it in ``worker_init_fn``."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__()
        assert end > start
        self.start = start
        self.end = end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end))


def split_start_end(worker_id: int) -> None:
    """torch's documented ``worker_init_fn``: each worker's dataset copy gets its own range."""
    worker_info = torch.utils.data.get_worker_info()
    dataset = worker_info.dataset  # the dataset copy in this worker
    overall_start = dataset.start
    overall_end = dataset.end
    per_worker = int(math.ceil((overall_end - overall_start) / float(worker_info.num_workers)))  # noqa: RUF046 - torch's docs, verbatim
    dataset.start = overall_start + worker_info.id * per_worker
    dataset.end = min(dataset.start + per_worker, overall_end)


class Uncopyable(IterableDataset):
    """``range(n)`` sharded by worker id; refuses ``copy.copy`` and pickling (like an object
    holding an OS handle). torch's forked workers inherit it without copying."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __copy__(self) -> Uncopyable:
        raise TypeError("Uncopyable cannot be copied")

    def __deepcopy__(self, memo: Any) -> Uncopyable:
        raise TypeError("Uncopyable cannot be copied")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("Uncopyable cannot be pickled")

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


class SelfSeen(Dataset):
    """``ds[i] == (i, worker id, whether info.dataset is self, whether self is the original)``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.original_id = id(self)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, int, bool, bool]:
        info = torch.utils.data.get_worker_info()
        return i, info.id, info.dataset is self, id(self) == self.original_id


class SlowWorker0Stream(IterableDataset):
    """Worker ``w`` yields ``w * 100 + j`` for ``j < per_worker``; worker 0 sleeps ``slow_s`` per item."""

    def __init__(self, per_worker: int = 3, slow_s: float = 0.4) -> None:
        self.per_worker = per_worker
        self.slow_s = slow_s

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        wid = 0 if info is None else info.id
        for j in range(self.per_worker):
            if wid == 0:
                time.sleep(self.slow_s)
            yield wid * 100 + j


class OverlongStream(IterableDataset):
    """Reports ``__len__ == 2`` and yields 4 items (in each worker: torch does not shard it)."""

    def __len__(self) -> int:
        return 2

    def __iter__(self) -> Iterator[int]:
        return iter(range(4))


class SleepAt(Dataset):
    """``ds[i] == i``; item ``slow_index`` sleeps ``seconds`` first."""

    def __init__(self, n: int, slow_index: int, seconds: float) -> None:
        self.n = n
        self.slow_index = slow_index
        self.seconds = seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.slow_index:
            time.sleep(self.seconds)
        return i


class GateAt(Dataset):
    """``ds[i] == i``; items in ``gated`` wait on ``gate`` (an Event), recording their thread
    names in ``stuck`` while they wait; ``base_s`` sleep for the others."""

    def __init__(self, n: int, gated: set[int], base_s: float = 0.0) -> None:
        self.n = n
        self.gated = set(gated)
        self.base_s = base_s
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.stuck: set[str] = set()
        self.started: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.started.append(i)
        if i in self.gated:
            with self.lock:
                self.stuck.add(threading.current_thread().name)
            self.gate.wait()
        elif self.base_s:
            time.sleep(self.base_s)
        return i


class FreshErrorAt(Dataset):
    """``ds[i] == i``; items in ``bad`` raise a new ``ValueError`` each call (the dataset keeps none)."""

    def __init__(self, n: int, bad: set[int], base_s: float = 0.0) -> None:
        self.n = n
        self.bad = set(bad)
        self.base_s = base_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.base_s:
            time.sleep(self.base_s)
        if i in self.bad:
            raise ValueError(f"bad item {i}")
        return i


class AsyncWorkerSeen(Dataset):
    """``await ds[i] == (i, worker id or -1)``, with ``delay`` seconds of awaiting."""

    def __init__(self, n: int, delay: float = 0.001) -> None:
        self.n = n
        self.delay = delay

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, i: int) -> tuple[int, int]:
        await asyncio.sleep(self.delay)
        info = torch.utils.data.get_worker_info()
        return i, -1 if info is None else info.id


class GatedStream(IterableDataset):
    """``range(n)`` sharded by worker; worker 0 blocks on ``gate`` before its first item:
    inside ``__iter__`` itself (``block_in="iter"``), or inside the first ``next()`` of the
    generator it returns (``"next"``: a generator refuses ``close()`` while it runs)."""

    def __init__(self, n: int, block_in: str = "iter") -> None:
        self.n = n
        self.block_in = block_in
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.stuck: set[str] = set()

    def _block(self) -> None:
        with self.lock:
            self.stuck.add(threading.current_thread().name)
        self.gate.wait()

    def _generate(self, wid: int, nw: int) -> Iterator[int]:
        if wid == 0:
            self._block()
        yield from range(wid, self.n, nw)

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        if self.block_in == "next":
            return self._generate(wid, nw)
        if wid == 0:
            self._block()
        return iter(range(wid, self.n, nw))
