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
(``benchmarks/stats_cost.py``); with stats off, nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import resource
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from torch_threadloader.skip import mark_stage

__all__ = [
    "DrainedStage",
    "LoaderStats",
    "STAGES",
    "Stage",
    "WORKER_STAGES",
    "current_stats",
    "marked",
    "set_current",
    "stage",
    "timed_iter",
    "verdict",
]

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

    def add_retries(self, retries: int) -> None:
        with self._lock:
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

    def snapshot(self) -> dict[str, Any]:
        recent = sorted(self.recent.copy())  # a copy: workers append meanwhile
        with self._lock:
            out: dict[str, Any] = {
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
    def drain(self) -> dict[str, Any] | None:
        """A worker process's stats since its last drain, for :meth:`merge` in the loader's
        process: each stage's delta, the scheduler samples and the process's CPU time."""
        stages = {}
        for name in WORKER_STAGES:  # the others are the caller's, in the loader's process
            delta = self.stages[name].drain()  # type: ignore[attr-defined]
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


def timed_iter(iterable: Iterable[Any], target: Stage) -> Iterator[Any]:
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


_current: contextvars.ContextVar[LoaderStats | None] = contextvars.ContextVar("threadloader_stats", default=None)
_marked = threading.local()  # seconds of the running item spent in marked stages, per thread


def current_stats() -> LoaderStats | None:
    """The stats of the loader whose thread (or task) this is, if it keeps stats."""
    return _current.get()


def set_current(stats: LoaderStats | None) -> None:
    """Make ``stats`` the calling thread's (or task's) loader stats, for :func:`stage`."""
    _current.set(stats)


def marked() -> float:
    """Seconds this thread has spent in :func:`stage` blocks (a running total)."""
    return float(getattr(_marked, "seconds", 0.0))


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage ``name`` (e.g. ``"transform"``) of the loader that runs it;
    the time is taken out of the enclosing item's ``fetch``. Costs two clock reads when the
    loader keeps stats, a context-variable read when it does not, and works anywhere."""
    stats = _current.get()
    if stats is None:
        try:
            yield
        except BaseException as exc:
            mark_stage(exc, name)  # for the record of a skipped sample
            raise
        return
    target = stats.stages.get(name)
    if target is None:
        raise ValueError(f"stage must be one of {', '.join(STAGES[:5])}, got {name!r}")
    stats.marks = True  # only ever set: a plain attribute write is safe from any thread
    start = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        target.add_error()
        mark_stage(exc, name)
        raise
    finally:
        seconds = time.perf_counter() - start
        target.record(seconds)
        _marked.seconds = getattr(_marked, "seconds", 0.0) + seconds


def verdict(snapshot: dict[str, Any]) -> tuple[str, str]:
    """``(kind, text)``: what limits the loader, and the change to make. ``kind`` is one of
    ``no-data``, ``training-bound``, ``fetch-bound`` / ``transform-bound`` (its threads wait),
    ``gil-bound`` (only where ``snapshot["gil_enabled"]``), ``cpu-bound``, ``collate-bound``,
    ``sampler-bound``, ``pin-bound``."""
    stages = snapshot["stages"]
    handover, train = stages["handover"]["busy_s"], stages["train"]["busy_s"]
    if snapshot["batches"] < 2 or handover + train <= 0:
        return "no-data", "no-data: iterate the loader (with stats=True) for a few batches first"
    waiting = handover / (handover + train)
    if waiting < 0.1:
        return (
            "training-bound",
            f"training-bound: the loader waits {1 - waiting:.0%} of the time for the training step, which "
            f"waits for the loader {waiting:.0%} of the time: the loader keeps up; a faster step would get data",
        )
    work = {name: stages[name]["busy_s"] for name in ("sampling", "fetch", "transform", "collate", "pin")}
    top = max(work, key=lambda k: work[k])
    share = work[top] / max(sum(work.values()), 1e-12)
    workers = max(snapshot["num_workers"], 1)
    cores_used = snapshot["cores_used"] or 0.0
    cores = snapshot["cores"]
    lead = f"the training step waits for data {waiting:.0%} of the time; {top} takes {share:.0%} of the loader's work"
    if top == "collate":
        return "collate-bound", (
            f"collate-bound: {lead}: make collate_fn cheaper (a batch written into reused buffers, "
            "torch_threadloader.images), or raise num_workers"
        )
    if top == "sampling":
        return "sampler-bound", f"sampler-bound: {lead}: the sampler runs in the caller's thread; make it cheaper"
    if top == "pin":
        return "pin-bound", f"pin-bound: {lead}: pin in reused buffers, or raise num_workers"
    cpu_share = stages[top]["cpu_share"]
    busy_threads = sum(work.values()) / max(snapshot["wall_s"], 1e-12)
    # Waiting, not computing: little CPU time in the stage's own time (or, unmeasured, in the
    # process). Many threads taking turns on the GIL also show little CPU each, but the
    # process then runs a core of Python flat out.
    io_wait = (cpu_share is not None and cpu_share < 0.3) or cores_used < 0.3 * min(busy_threads, cores)
    if io_wait and not (cores_used >= 0.9 and busy_threads > 1.5 and cpu_share is not None and cpu_share > 0.02):
        return f"{top}-bound", (
            f"{top}-bound: {lead}, and its threads wait (I/O) most of that time "
            f"(the process used {cores_used:.1f} cores): raise item_concurrency (now "
            f"{snapshot['item_concurrency']}) or num_workers (now {snapshot['num_workers']})"
        )
    idle = snapshot.get("machine_idle_cores")
    spare = idle is None or idle >= 0.5  # cores were free: the process did not take them
    # Of the loader threads' busy time: on a CPU, waiting for a CPU (other processes), or
    # blocked; blocked while they compute is the GIL (threads taking turns).
    sampled = snapshot.get("sampled_busy_s", 0.0)
    on_cpu = snapshot.get("sampled_cpu_s", 0.0) / max(sampled, 1e-12)
    runq = snapshot.get("sampled_runq_s", 0.0) / max(sampled, 1e-12)
    blocked = max(1.0 - on_cpu - runq, 0.0)
    measured = sampled > 0.05
    # Compute-bound items whose threads are nonetheless blocked much of the time, while the
    # process runs about one core: they take turns on the GIL (each item, once it runs, runs
    # to its end within a switch interval, so the turns fall between items, not inside them).
    gil = (blocked > 0.3 and on_cpu > 0.15) if measured else (busy_threads > 1.5 and spare)
    # Without a GIL (a free-threaded build) threads never take turns on it: blocked time is
    # something else (a lock, I/O), and the verdict does not name the GIL.
    gil = gil and bool(snapshot.get("gil_enabled", True))
    procs = int(snapshot.get("worker_processes") or 0)
    # With worker processes each has its own GIL: what binds is one process's threads.
    per_process = (
        snapshot.get("worker_processes_cpu_s", 0.0) / max(snapshot["wall_s"], 1e-12) / procs if procs else cores_used
    )
    if workers >= 2 and per_process < 1.3 and gil:
        where = f"each of the {procs} worker processes" if procs else "the process"
        change = (
            f"raise worker_processes (now {procs}) and lower num_workers"
            if procs
            else "use worker processes (ThreadLoader(worker_processes=P))"
        )
        return "gil-bound", (
            f"GIL-bound: {lead}; its {workers} threads were on a CPU only {on_cpu:.0%} of the time and blocked "
            f"{blocked:.0%} (waiting for a CPU {runq:.0%}) while {where} used {per_process:.1f} cores: the work "
            f"holds the GIL (pure Python), so threads take turns. {change[0].upper()}{change[1:]}, or move the "
            "work to code that releases the GIL (NumPy, torch ops, torchvision.io)"
        )
    where = "the transform" if top == "transform" else "fetch"
    busy_machine = "" if spare and runq < 0.3 else " (other processes kept it waiting for a CPU)"
    return "cpu-bound", (
        f"CPU-bound in {where}: {lead}; the process used {cores_used:.1f} of {cores} cores{busy_machine}: raise "
        f"num_workers (now {snapshot['num_workers']}) up to the cores, or make {where} cheaper"
    )
