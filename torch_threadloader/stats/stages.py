"""A loader's stats per stage, and the verdict ``report()`` draws from them.

Stages: ``sampling`` (the sampler's ``next()``, in the caller's thread), ``fetch`` (each
item's ``__getitem__``, or the dataset's iterator, less what it marks as another stage),
``transform`` (what the dataset marks with :func:`stage`), ``collate``, ``pin``,
``handover`` (the caller's wait inside ``next()``) and ``train`` (the caller's time between
two ``next()`` calls). Each keeps a count, errors, retries, busy seconds, CPU seconds where
measured (per batch, on the thread that ran it) and a latency histogram (quarter octaves from
1 µs) for p50/p90/p99.

Cost: with stats on, two ``perf_counter()`` calls and a list append per item, a few per
batch, and the thread's CPU time read at most every 5 ms per thread
(``python -m benchmarks stats_cost``); with stats off, nothing.
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["CPU_SAMPLE_INTERVAL", "RECENT", "STAGES", "WORKER_STAGES", "DrainedStage", "Stage"]

STAGES = ("sampling", "fetch", "transform", "collate", "pin", "handover", "train")
#: The stages a worker process runs (and reports to the loader's process).
WORKER_STAGES = ("fetch", "transform", "collate", "pin")
#: The latencies each stage keeps for its percentiles: its most recent calls.
RECENT = 8192
#: How often (seconds) a worker thread measures its CPU time over a batch.
CPU_SAMPLE_INTERVAL = 0.005


class Stage:
    """One stage's counters: totals since the start, and the latencies of its most recent
    ``RECENT`` calls (the percentiles are theirs). Thread-safe: totals change under a lock,
    and the recent latencies are a ``deque`` (whose appends are atomic)."""

    __slots__ = ("_lock", "busy_s", "count", "cpu_s", "cpu_wall_s", "errors", "name", "recent", "retries")

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self.count = 0
        self.errors = 0
        self.retries = 0
        self.busy_s = 0.0
        self.cpu_s = 0.0  # CPU time measured, over ...
        self.cpu_wall_s = 0.0  # ... this much of the busy time
        self.recent: deque[float] = deque(maxlen=RECENT)

    def record(self, seconds: float) -> None:
        self.recent.append(seconds)
        with self._lock:
            self.count += 1
            self.busy_s += seconds

    def record_many(self, durations: list[float], *, cpu: float | None = None, wall: float = 0.0) -> None:
        """The items of one batch at once; ``cpu`` seconds over ``wall`` seconds if measured."""
        self.recent.extend(durations)
        total = sum(durations)
        with self._lock:
            self.count += len(durations)
            self.busy_s += total
            if cpu is not None:
                self.cpu_s += cpu
                self.cpu_wall_s += wall

    def add_error(self, retries: int = 0) -> None:
        with self._lock:
            self.errors += 1
            self.retries += retries

    def merge(self, delta: tuple[int, int, int, float, float, float, list[float]]) -> None:
        """Add what a :class:`DrainedStage` of a worker process handed over."""
        count, errors, retries, busy, cpu, wall, durations = delta
        self.recent.extend(durations)
        with self._lock:
            self.count += count
            self.errors += errors
            self.retries += retries
            self.busy_s += busy
            self.cpu_s += cpu
            self.cpu_wall_s += wall

    def snapshot(self) -> dict[str, float | None]:
        recent = sorted(self.recent.copy())  # a copy: workers append meanwhile
        with self._lock:
            out: dict[str, float | None] = {
                "count": self.count,
                "errors": self.errors,
                "retries": self.retries,
                "busy_s": self.busy_s,
                "cpu_share": (self.cpu_s / self.cpu_wall_s) if self.cpu_wall_s > 0 else None,
            }
        for name, q in (("p50_s", 0.5), ("p90_s", 0.9), ("p99_s", 0.99)):
            out[name] = recent[min(int(q * len(recent)), len(recent) - 1)] if recent else None
        return out


class DrainedStage(Stage):
    """A worker process's stage: what was recorded since the last :meth:`drain`, which hands
    it over (to the loader's process, where :meth:`Stage.merge` adds it) and starts again.
    Every change is under the lock, so nothing recorded during a drain is lost or counted twice."""

    __slots__ = ()

    def record(self, seconds: float) -> None:
        with self._lock:
            self.recent.append(seconds)
            self.count += 1
            self.busy_s += seconds

    def record_many(self, durations: list[float], *, cpu: float | None = None, wall: float = 0.0) -> None:
        with self._lock:
            self.recent.extend(durations)
            self.count += len(durations)
            self.busy_s += sum(durations)
            if cpu is not None:
                self.cpu_s += cpu
                self.cpu_wall_s += wall

    def drain(self) -> tuple[int, int, int, float, float, float, list[float]] | None:
        """``(count, errors, retries, busy_s, cpu_s, cpu_wall_s, latencies)`` since the last
        drain, or None when nothing happened."""
        with self._lock:
            if not (self.count or self.errors or self.retries):
                return None
            out = (self.count, self.errors, self.retries, self.busy_s, self.cpu_s, self.cpu_wall_s, list(self.recent))
            self.count = self.errors = self.retries = 0
            self.busy_s = self.cpu_s = self.cpu_wall_s = 0.0
            self.recent.clear()
        return out
