"""The verdict behind ``loader.report()``: what limits the loader, and the change to make.

The checks run in order, each on the same :class:`_Load` (the numbers read once from a
snapshot); the first that names a limit wins: too little data, the training step, a stage
whose fix is its own (collate, sampling, pinning), threads waiting on I/O, threads taking
turns on the GIL, and otherwise the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["verdict"]

Verdict = tuple[str, str]

#: A top stage whose change is its own: its verdict's kind and the change to make.
_OWN_CHANGE = {
    "collate": (
        "collate-bound",
        "make collate_fn cheaper (a batch written into reused buffers, torch_threadloader.images), or raise num_workers",
    ),
    "sampling": ("sampler-bound", "the sampler runs in the caller's thread; make it cheaper"),
    "pin": ("pin-bound", "pin in reused buffers, or raise num_workers"),
}


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
    load = _Load.of(snapshot, waiting)
    for check in _CHECKS:
        found = check(load)
        if found is not None:
            return found
    return _cpu_bound(load)


@dataclass(frozen=True)
class _Load:
    """What the checks read of a snapshot where the training step waits for data."""

    snapshot: dict[str, Any]
    top: str  # the stage with the most of the loader's work
    work: float  # the loader's busy seconds, summed over its stages
    lead: str  # the verdicts' common first words

    @classmethod
    def of(cls, snapshot: dict[str, Any], waiting: float) -> _Load:
        stages = snapshot["stages"]
        work = {name: stages[name]["busy_s"] for name in ("sampling", "fetch", "transform", "collate", "pin")}
        top = max(work, key=lambda k: work[k])
        share = work[top] / max(sum(work.values()), 1e-12)
        lead = (
            f"the training step waits for data {waiting:.0%} of the time; {top} takes {share:.0%} of the loader's work"
        )
        return cls(snapshot, top, sum(work.values()), lead)

    @property
    def cores_used(self) -> float:
        return float(self.snapshot["cores_used"] or 0.0)

    @property
    def busy_threads(self) -> float:
        """Loader threads busy on average over the wall time."""
        return float(self.work / max(self.snapshot["wall_s"], 1e-12))

    @property
    def cpu_share(self) -> float | None:
        """The top stage's CPU time over its own time (None where unmeasured)."""
        share = self.snapshot["stages"][self.top]["cpu_share"]
        return None if share is None else float(share)

    @property
    def spare(self) -> bool:
        """Cores were free (or unknown): the process did not take them."""
        idle = self.snapshot.get("machine_idle_cores")
        return idle is None or idle >= 0.5

    def scheduler(self) -> tuple[float, float, float, bool]:
        """Of the loader threads' sampled busy time, the shares on a CPU, waiting for a CPU
        (other processes) and blocked (blocked while they compute is the GIL: threads taking
        turns), and whether enough was sampled."""
        sampled = self.snapshot.get("sampled_busy_s", 0.0)
        on_cpu = self.snapshot.get("sampled_cpu_s", 0.0) / max(sampled, 1e-12)
        runq = self.snapshot.get("sampled_runq_s", 0.0) / max(sampled, 1e-12)
        return on_cpu, runq, max(1.0 - on_cpu - runq, 0.0), sampled > 0.05


def _own_change(load: _Load) -> Verdict | None:
    """collate, sampling or pinning on top: the change is that stage's own."""
    own = _OWN_CHANGE.get(load.top)
    if own is None:
        return None
    kind, change = own
    return kind, f"{kind}: {load.lead}: {change}"


def _io_bound(load: _Load) -> Verdict | None:
    """Waiting, not computing: little CPU time in the stage's own time (or, unmeasured, in the
    process), not counting the time spent waiting for a CPU where the scheduler was sampled, so
    a machine other processes load reads as what the threads do. Many threads taking turns on
    the GIL also show little CPU each, but the process then runs a core of Python flat out."""
    snapshot, cpu_share, cores_used = load.snapshot, load.cpu_share, load.cores_used
    if cpu_share is not None:
        # Time waiting for a CPU (other processes took it) is neither computing nor waiting
        # for I/O: the share is of the rest of the stage's time.
        _, runq, _, measured = load.scheduler()
        io_wait = cpu_share < 0.3 * (1.0 - min(runq, 0.9) if measured else 1.0)
    else:
        io_wait = cores_used < 0.3 * min(load.busy_threads, snapshot["cores"])
    if not io_wait or (cores_used >= 0.9 and load.busy_threads > 1.5 and cpu_share is not None and cpu_share > 0.02):
        return None
    top = load.top
    return f"{top}-bound", (
        f"{top}-bound: {load.lead}, and its threads wait (I/O) most of that time "
        f"(the process used {cores_used:.1f} cores): raise item_concurrency (now "
        f"{snapshot['item_concurrency']}) or num_workers (now {snapshot['num_workers']})"
    )


def _gil_bound(load: _Load) -> Verdict | None:
    """Compute-bound items whose threads are nonetheless blocked much of the time, while the
    process (or, with worker processes, each of them: each has its own GIL) runs about one
    core: they take turns on the GIL (each item, once it runs, runs to its end within a switch
    interval, so the turns fall between items, not inside them). Without a GIL (a
    free-threaded build) threads never take turns on it: blocked time is something else (a
    lock, I/O), and the verdict does not name the GIL."""
    snapshot = load.snapshot
    on_cpu, runq, blocked, measured = load.scheduler()
    gil = (blocked > 0.3 and on_cpu > 0.15) if measured else (load.busy_threads > 1.5 and load.spare)
    gil = gil and bool(snapshot.get("gil_enabled", True))
    procs = int(snapshot.get("worker_processes") or 0)
    per_process = (
        snapshot.get("worker_processes_cpu_s", 0.0) / max(snapshot["wall_s"], 1e-12) / procs
        if procs
        else load.cores_used
    )
    workers = max(snapshot["num_workers"], 1)
    if not (workers >= 2 and per_process < 1.3 and gil):
        return None
    where = f"each of the {procs} worker processes" if procs else "the process"
    change = (
        f"raise worker_processes (now {procs}) and lower num_workers"
        if procs
        else "use worker processes (ThreadLoader(worker_processes=P))"
    )
    return "gil-bound", (
        f"GIL-bound: {load.lead}; its {workers} threads were on a CPU only {on_cpu:.0%} of the time and blocked "
        f"{blocked:.0%} (waiting for a CPU {runq:.0%}) while {where} used {per_process:.1f} cores: the work "
        f"holds the GIL (pure Python), so threads take turns. {change[0].upper()}{change[1:]}, or move the "
        "work to code that releases the GIL (NumPy, torch ops, torchvision.io)"
    )


def _cpu_bound(load: _Load) -> Verdict:
    """What is left: the loader's threads compute; more of them, up to the cores, or less work."""
    snapshot = load.snapshot
    _, runq, _, _ = load.scheduler()
    where = "the transform" if load.top == "transform" else "fetch"
    busy_machine = "" if load.spare and runq < 0.3 else " (other processes kept it waiting for a CPU)"
    return "cpu-bound", (
        f"CPU-bound in {where}: {load.lead}; the process used {load.cores_used:.1f} of {snapshot['cores']} "
        f"cores{busy_machine}: raise num_workers (now {snapshot['num_workers']}) up to the cores, or make "
        f"{where} cheaper"
    )


_CHECKS: tuple[Callable[[_Load], Verdict | None], ...] = (_own_change, _io_bound, _gil_bound)
