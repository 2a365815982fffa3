"""``LoaderStats``: every stage of one loader, the process's CPU time and the worker threads'
scheduler samples over the same wall time, and the merge of a worker process's share."""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from torch_threadloader.stats.stages import STAGES, WORKER_STAGES, DrainedStage, Stage

__all__ = ["LoaderStats", "timed_iter"]

_T = TypeVar("_T")


class LoaderStats:
    """Every stage of one loader, summed over its epochs, with the process's CPU time over
    the same wall time (for telling a GIL-bound loader from a CPU-bound one)."""

    def __init__(
        self, num_workers: int, item_concurrency: int, *, worker_processes: int = 0, drained: bool = False
    ) -> None:
        self.num_workers = num_workers
        self.item_concurrency = item_concurrency
        self.worker_processes = worker_processes
        self.drained = drained  # a worker process's: its stages are drained to the loader's process
        self.stages = {name: (DrainedStage if drained else Stage)(name) for name in STAGES}
        self._handover, self._train = self.stages["handover"], self.stages["train"]
        self._lock = threading.Lock()
        self.marks = False  # whether a stage() block has run (items then leave its time out)
        self.batches = 0
        self.ready = 0  # next() calls that found a batch ready (waited under 50 µs)
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.idle_s: float | None = 0.0  # the machine's idle CPU time (None where unknown)
        self._open: tuple[float, float, float | None] | None = None
        # Sampled by worker threads (Linux schedstat, at most every 20 ms each): of
        # ``sched_busy_s`` seconds of their wall time, how long they were on a CPU and how long
        # runnable but waiting for one; the rest they were blocked (on work, I/O, or the GIL).
        self.sched_busy_s = 0.0
        self.sched_cpu_s = 0.0
        self.sched_runq_s = 0.0
        self.children_cpu_s = 0.0  # CPU time of worker processes (their deltas, merged)
        self._drained_cpu = _process_cpu() if drained else 0.0

    # -- the caller's side, one thread ---------------------------------------------------------
    def epoch_started(self) -> None:
        with self._lock:
            if self._open is None:
                self._open = (time.perf_counter(), _process_cpu(), _machine_idle())

    def epoch_ended(self) -> None:
        with self._lock:
            opened, self._open = self._open, None
        if opened is not None:
            wall, cpu = time.perf_counter() - opened[0], _process_cpu() - opened[1]
            idle_now = _machine_idle()
            with self._lock:
                self.wall_s += wall
                self.cpu_s += cpu
                if self.idle_s is not None and opened[2] is not None and idle_now is not None:
                    self.idle_s += idle_now - opened[2]
                else:
                    self.idle_s = None

    def worker_busy(self, seconds: float) -> None:
        """A worker thread finished a batch: every 20 ms or so, sample its scheduler counters
        (time on a CPU, time runnable but waiting for one) over the wall time since its last
        sample; the rest of that time it was blocked (waiting for work, on I/O, or the GIL)."""
        local = _sched_local
        now = time.perf_counter()
        if now - getattr(local, "at", 0.0) < 0.02:
            return
        sample = _own_schedstat()
        last, since = getattr(local, "last", None), getattr(local, "at", 0.0)
        local.at, local.last = now, sample
        if last is None or sample is None:
            return
        with self._lock:
            self.sched_busy_s += now - since
            self.sched_cpu_s += sample[0] - last[0]
            self.sched_runq_s += sample[1] - last[1]

    def handed(self, waited: float, trained: float | None) -> None:
        """The caller got a batch after ``waited`` seconds in ``next()``, ``trained`` seconds
        after it got the one before (``None`` for an epoch's first)."""
        self._handover.record(waited)
        if trained is not None:
            self._train.record(trained)
        with self._lock:
            self.batches += 1
            self.ready += waited < 50e-6

    # -- worker processes ----------------------------------------------------------------------
    def drain(self) -> dict[str, object] | None:
        """A worker process's stats since its last drain, for :meth:`merge` in the loader's
        process: each stage's delta, the scheduler samples and the process's CPU time."""
        stages = {}
        for name in WORKER_STAGES:  # the others are the caller's, in the loader's process
            stage = self.stages[name]
            assert isinstance(stage, DrainedStage), "drain() is for a worker process's stats (drained=True)"
            delta = stage.drain()
            if delta is not None:
                stages[name] = delta
        cpu_now = _process_cpu()
        with self._lock:
            sched = (self.sched_busy_s, self.sched_cpu_s, self.sched_runq_s)
            self.sched_busy_s = self.sched_cpu_s = self.sched_runq_s = 0.0
            cpu, self._drained_cpu = cpu_now - self._drained_cpu, cpu_now
        if not stages and not any(sched) and cpu <= 0:
            return None
        return {"stages": stages, "sched": sched, "cpu_s": cpu, "marks": self.marks}

    def merge(self, delta: dict[str, Any]) -> None:
        """Add a worker process's :meth:`drain` to this loader's stats."""
        for name, stage_delta in delta["stages"].items():
            target = self.stages.get(name)
            if target is not None:
                target.merge(stage_delta)
        busy, cpu, runq = delta["sched"]
        with self._lock:
            self.sched_busy_s += busy
            self.sched_cpu_s += cpu
            self.sched_runq_s += runq
            self.children_cpu_s += float(delta["cpu_s"])
        if delta.get("marks"):
            self.marks = True

    # -- reading -------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            children = self.children_cpu_s
            wall, cpu, idle = self.wall_s, self.cpu_s + children, self.idle_s
            sched = (self.sched_busy_s, self.sched_cpu_s, self.sched_runq_s)
            if self._open is not None:
                wall += time.perf_counter() - self._open[0]
                cpu += _process_cpu() - self._open[1]
                now, then = _machine_idle(), self._open[2]
                idle = None if idle is None or now is None or then is None else idle + now - then
            batches, ready = self.batches, self.ready
        return {
            "stages": {name: s.snapshot() for name, s in self.stages.items()},
            "batches": batches,
            "ready_share": ready / batches if batches else None,
            "wall_s": wall,
            "process_cpu_s": cpu,
            "cores_used": cpu / wall if wall > 0 else None,
            "machine_idle_cores": idle / wall if idle is not None and wall > 0 else None,
            "sampled_busy_s": sched[0],
            "sampled_cpu_s": sched[1],
            "sampled_runq_s": sched[2],
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
            "num_workers": self.num_workers,
            "item_concurrency": self.item_concurrency,
            "worker_processes": self.worker_processes,
            "worker_processes_cpu_s": children,
            "gil_enabled": _gil_enabled(),
        }


def timed_iter(iterable: Iterable[_T], target: Stage) -> Iterator[_T]:
    """``iterable``'s items, each ``next()`` timed into ``target``."""
    it = iter(iterable)
    perf = time.perf_counter
    while True:
        start = perf()
        try:
            item = next(it)
        except StopIteration:
            return
        target.record(perf() - start)
        yield item


_sched_local = threading.local()


def _own_schedstat() -> tuple[float, float] | None:
    """This thread's (seconds on a CPU, seconds runnable and waiting for one), from Linux's
    ``/proc/thread-self/schedstat``; None elsewhere."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            on_cpu, waiting = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def _machine_idle() -> float | None:
    """Seconds every CPU of the machine has been idle, summed (Linux ``/proc/stat``), else None."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")  # idle + iowait
    except (OSError, ValueError, IndexError):
        return None


def _gil_enabled() -> bool:
    """Whether this interpreter runs with the GIL (always before 3.13; a free-threaded build
    may turn it back on for an extension that needs it)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return bool(check()) if check is not None else True


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
