"""The checks of the worker-process arguments (``worker_processes``, ``process_nice``,
``process_affinity``) and the start method (``multiprocessing_context``), run when the loader
is built: a bad value is refused with an error naming it."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterable
from multiprocessing.context import BaseContext

import torch.multiprocessing

__all__ = ["check_context", "check_process_affinity", "check_process_nice", "check_worker_processes", "resolve_context"]


def check_worker_processes(worker_processes: object) -> int:
    """``worker_processes`` as given, refused with an error naming it unless a non-negative int."""
    if isinstance(worker_processes, bool) or not isinstance(worker_processes, int):
        raise TypeError(
            f"worker_processes must be a non-negative int, got {worker_processes!r} ({type(worker_processes).__name__})"
        )
    if worker_processes < 0:
        raise ValueError(f"worker_processes must be a non-negative int (0: no processes), got {worker_processes!r}")
    return worker_processes


def check_process_nice(process_nice: object, worker_processes: int) -> int:
    """``process_nice`` as given: an int from 0 to 19 (raising a priority needs privileges),
    and only with worker processes (a thread's priority in the training process would make
    the training step wait on it for the GIL: see ``docs/processes.md``)."""
    if isinstance(process_nice, bool) or not isinstance(process_nice, int) or not 0 <= process_nice <= 19:
        raise ValueError(f"process_nice must be an int from 0 to 19, got {process_nice!r}")
    if process_nice and not worker_processes:
        raise ValueError("process_nice applies to worker processes: set worker_processes=P, or leave it 0")
    return process_nice


def check_process_affinity(affinity: object, worker_processes: int) -> tuple[frozenset[int], ...] | None:
    """``process_affinity`` as the CPU set of each worker process: ``None`` (the loader's
    process's set, inherited), CPU numbers (every process on those), or one collection of
    CPU numbers per process. Refused, naming the argument, without worker processes, where
    the OS has no ``sched_setaffinity`` (Linux has it), or for CPUs this process may not use."""
    if affinity is None:
        return None
    if not worker_processes:
        raise ValueError("process_affinity applies to worker processes: set worker_processes=P, or leave it None")
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("process_affinity needs os.sched_setaffinity (Linux); leave it None here")
    if isinstance(affinity, str | bytes) or not isinstance(affinity, Iterable):
        raise TypeError(
            f"process_affinity must be CPU numbers, or one collection of them per process, got {affinity!r}"
        )
    items = list(affinity)
    per_process = bool(items) and all(isinstance(x, Iterable) and not isinstance(x, str | bytes) for x in items)
    sets = [list(x) for x in items] if per_process else [items] * worker_processes
    if per_process and len(sets) != worker_processes:
        raise ValueError(
            f"process_affinity has {len(sets)} CPU sets for worker_processes={worker_processes}: give one per "
            "process, or one set of CPU numbers for all"
        )
    out = []
    for i, cpus in enumerate(sets):
        if not cpus or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in cpus):
            raise ValueError(
                f"process_affinity: the CPU set of process {i} must be a non-empty set of ints >= 0, got {cpus!r}"
            )
        out.append(frozenset(cpus))
    missing = _cpus_refused(frozenset().union(*out))
    if missing:
        raise ValueError(
            f"process_affinity: CPUs {missing} are not available to this process (its cpuset refuses them)"
        )
    return tuple(out)


def _cpus_refused(cpus: frozenset[int]) -> list[int]:
    """The CPUs a thread of this process may not run on: each is tried by a short-lived
    thread on itself (the calling thread's own set may be narrower than the process's, e.g.
    a training thread pinned to one CPU, and it is left as it is)."""
    refused: list[int] = []

    def probe() -> None:
        for cpu in sorted(cpus):
            try:
                os.sched_setaffinity(0, {cpu})
            except OSError:
                refused.append(cpu)

    thread = threading.Thread(target=probe, name="threadloader-affinity-probe")
    thread.start()
    thread.join()
    return refused


def check_context(context: object, num_workers: int, worker_processes: int) -> BaseContext | None:
    """``multiprocessing_context`` as torch's ``DataLoader`` keeps it: ``None``, or a start
    method's context (a name is made one). Refused as torch refuses it, with torch's messages: a
    name that is not a start method here (``ValueError``), anything else that is not a context
    (``TypeError``), and any context without workers (``ValueError``; worker processes count)."""
    if context is None:
        return None
    if num_workers <= 0 and not worker_processes:
        raise ValueError(
            "multiprocessing_context can only be used with multi-process loading (num_workers > 0), but got "
            f"num_workers={num_workers}"
        )
    if isinstance(context, str):
        valid_start_methods = torch.multiprocessing.get_all_start_methods()
        if context not in valid_start_methods:
            raise ValueError(
                f"multiprocessing_context option should specify a valid start method in {valid_start_methods!r}, "
                f"but got multiprocessing_context={context!r}"
            )
        context = torch.multiprocessing.get_context(context)
    if not isinstance(context, BaseContext):
        raise TypeError(
            "multiprocessing_context option should be a valid context object or a string specifying the start "
            f"method, but got multiprocessing_context={context}"
        )
    return context


def resolve_context(context: object) -> BaseContext:
    """The start method of worker processes: ``None`` is forkserver where available (else
    spawn); a name or a context object as torch's ``multiprocessing_context`` takes them
    (checked as :func:`check_context` checks it)."""
    if context is None:
        methods = multiprocessing.get_all_start_methods()
        return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    checked = check_context(context, 0, 1)
    assert checked is not None
    return checked
