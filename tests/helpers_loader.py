"""Fixture datasets for the ThreadLoader tests, named by what they do, and the small helpers
every folder of tests shares (a state through ``torch.save``, a free port)."""

from __future__ import annotations

import asyncio
import collections
import io
import socket
import threading
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

Point = collections.namedtuple("Point", ["x", "y"])


def through_torch_save(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` saved with ``torch.save`` and loaded back with ``weights_only=True``, as a
    checkpoint holds it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer, weights_only=True)
    return loaded


def next_past_timeouts(it: Any, batch: int) -> Any:
    """``next(it)``, waiting through the timeouts of batch ``batch`` (which keeps its place, as
    in torch): for a test whose short ``timeout`` is meant for a later, slow batch, while this
    one may take longer on a loaded machine (worker processes starting, say)."""
    while True:
        try:
            return next(it)
        except TimeoutError as exc:
            assert f"batch {batch} " in str(exc), exc


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_same(a: Any, b: Any) -> None:
    """Deep equality for batches: tensors by value, dtype and shape."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (len(a), len(b))
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b, (a, b)


class RichDataset(Dataset):
    """Items of every kind default_collate handles: tensors, numpy, numbers, strings, dicts, namedtuples."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "tensor": torch.tensor([i, -i], dtype=torch.float32),
            "array": np.full((2,), i, dtype=np.int16),
            "int": i,
            "float": i / 3,
            "str": f"item-{i}",
            "point": Point(i, torch.tensor(i * 2)),
        }


def sum_ints_and_strings(items: list[dict[str, Any]]) -> tuple[Any, list[str]]:
    """A ``collate_fn`` for :class:`RichDataset` items: the sum of their ints, their strings."""
    return sum(d["int"] for d in items), [d["str"] for d in items]


class RangeDataset(Dataset):
    """``ds[i] == i``, counting calls. The lock is the class's, so that a dataset pickles (to
    worker processes, which count in their own copies)."""

    lock = threading.Lock()

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.calls += 1
        return i


class GetItemsDataset(RangeDataset):
    """Defines ``__getitems__``, which torch prefers for whole batches."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.batches: list[list[int]] = []

    def __getitems__(self, indices: list[int]) -> list[int]:
        with self.lock:
            self.batches.append(list(indices))
        return [i * 10 for i in indices]


class InFlightCounter:
    """A lock-protected counter of calls running at once, with its peak."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


class SlowAt(Dataset):
    """``ds[i] == i``; item ``slow_index`` sleeps ``seconds``, others ``base`` seconds; counts
    items started and the peak started-but-not-consumed (the test reports consumption)."""

    def __init__(self, n: int, slow_index: int = -1, seconds: float = 0.3, base: float = 0.0) -> None:
        self.n = n
        self.slow_index = slow_index
        self.seconds = seconds
        self.base = base
        self.running = InFlightCounter()
        self.lock = threading.Lock()
        self.started = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.started += 1
        with self.running:
            time.sleep(self.seconds if i == self.slow_index else self.base)
        return i


class FailingAt(Dataset):
    """``ds[i] == i`` except at ``bad`` indices, which raise the stored exception objects."""

    def __init__(self, n: int, bad: set[int]) -> None:
        self.n = n
        self.errors = {i: ValueError(f"bad item {i}") for i in bad}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i in self.errors:
            raise self.errors[i]
        return i


class ShardedStream(IterableDataset):
    """Yields ``range(n)``, split across workers through ``get_worker_info()``, as torch's docs show."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


class UnshardedStream(IterableDataset):
    """Yields ``range(n)`` in every worker: torch duplicates it once per worker."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


class UnevenStream(IterableDataset):
    """Worker ``w`` of ``k`` yields ``3 * w + 2`` items tagged with its id: workers end at different times."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w = 0 if info is None else info.id
        return iter([w * 1000 + j for j in range(3 * w + 2)])


class _LoopCounts:
    """Counters of an :class:`AsyncRange` and its workers' copies together (touched on the loop thread only)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.cancelled = 0


def _counted(name: str) -> property:
    def get(self: AsyncRange) -> int:
        return int(getattr(self.counts, name))

    def set_(self: AsyncRange, value: int) -> None:
        setattr(self.counts, name, value)

    return property(get, set_)


class AsyncRange(Dataset):
    """``await ds[i] == i`` after ``delay`` seconds, counting coroutines in flight (over the
    workers' copies too: the counters are one object they share); ``aclose()`` is recorded."""

    in_flight = _counted("in_flight")
    peak = _counted("peak")
    cancelled = _counted("cancelled")

    def __init__(self, n: int, delay: float = 0.0, fail_at: int | None = None) -> None:
        self.n = n
        self.delay = delay
        self.fail_at = fail_at
        self.counts = _LoopCounts()
        self.closed = False
        self.loop_threads: set[str] = set()

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, i: int) -> int:
        self.loop_threads.add(threading.current_thread().name)
        self.in_flight += 1  # only touched on the loop thread
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if i == self.fail_at:
                raise KeyError(i)
            return i
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        await asyncio.sleep(0)
        self.closed = True
