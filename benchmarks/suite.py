"""Runs workloads one after the other and collects their results with the machine's report."""

from __future__ import annotations

import datetime
import hashlib
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from benchmarks.harness import Scale, WorkloadResult, evaluate_target, run_case, steps
from benchmarks.report import result_to_json
from benchmarks.workloads import NAMES, load
from torch_threadloader.tools import info

__all__ = ["ProgressSink", "run_suite"]


def _scaling(step: Callable[[int], object], threads: int, seconds: float, name: str) -> float:
    """Throughput of ``threads`` threads, thread ``i`` repeating ``step(i)``, over that of one
    thread repeating ``step(0)``: ``threads`` when they scale perfectly. About ``2 * seconds``."""
    start = time.perf_counter()
    rounds = 0
    while time.perf_counter() - start < seconds / 2:
        step(0)
        rounds += 1
    one = (time.perf_counter() - start) / rounds  # seconds per step, one thread
    per_thread = max(1, int(seconds / one / 2))

    def work(i: int) -> None:
        for _ in range(per_thread):
            step(i)

    workers = [threading.Thread(target=work, args=(i,), name=f"{name}-{i}") for i in range(threads)]
    start = time.perf_counter()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - start
    return threads * per_thread * one / elapsed


def effective_cpus(cpus: int, seconds: float = 0.1) -> float:
    """How many CPUs the machine gives this process right now: the throughput of ``cpus``
    threads hashing (which runs outside the GIL) over that of one thread. On a quiet machine
    it is close to ``cpus``; on a shared one, less. Takes about ``2 * seconds``."""
    block = bytes(1 << 20)
    return _scaling(lambda i: hashlib.sha256(block).digest(), cpus, seconds, "bench-calibrate")


def memory_scaling(cpus: int, seconds: float = 0.1, mib: int = 32) -> float:
    """How much more memory bandwidth ``cpus`` threads get than one, right now: each thread
    copies its own ``mib`` MiB array (beyond the caches) with NumPy, outside the GIL. Work
    that streams through memory (normalising, stacking big batches) can scale across threads
    no further than this, however many CPUs there are. Takes about ``2 * seconds``."""
    import numpy as np

    arrays = [(np.ones(mib << 18, dtype=np.float32), np.ones(mib << 18, dtype=np.float32)) for _ in range(cpus)]
    for src, dst in arrays:  # every page faulted in before timing: the kernel's zeroing is not bandwidth
        np.copyto(dst, src)
    return _scaling(lambda i: np.copyto(arrays[i][1], arrays[i][0]), cpus, seconds, "bench-bandwidth")


class ProgressSink(Protocol):
    """Where the suite reports progress (the CLI's tqdm bar)."""

    def stage(self, name: str, steps: int) -> None:
        """A workload starts; it will report ``steps`` steps."""

    def step(self, n: int) -> None:
        """``n`` steps (epochs, rounds or probes) are done."""


def run_suite(
    names: Sequence[str],
    scale: Scale,
    *,
    command: str,
    progress: ProgressSink | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Run the named workloads (all, in the registry's order, when ``names`` is empty) and
    return the JSON-ready results. Generated files live in a temporary directory (inside
    ``workdir`` when given) that is removed afterwards."""
    selected = [load(n) for n in (names or NAMES)]
    machine = info.collect()
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    results: list[WorkloadResult] = []
    with tempfile.TemporaryDirectory(prefix="threadloader-bench-", dir=workdir) as tmp, warnings.catch_warnings():
        # torch warns that 16 worker processes exceed the CPU count: that is the point of the
        # remote workloads (they wait, not compute), and it is the configuration users run.
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        for workload in selected:
            begin = time.perf_counter()
            cores_before = effective_cpus(machine["usable_cpus"])
            bandwidth_before = memory_scaling(machine["usable_cpus"])
            with workload.cases(scale, Path(tmp) / workload.name) as cases:
                if progress is not None:
                    progress.stage(workload.name, sum(steps(case, scale) for case in cases))
                case_results = [
                    run_case(case, scale, progress.step if progress is not None else None) for case in cases
                ]
            for case, result in zip(cases, case_results, strict=True):
                result.extra.update(case.extra)
                result.notes = case.notes
            by_name = {r.name: r for r in case_results}
            cores_after = effective_cpus(machine["usable_cpus"])
            bandwidth_after = memory_scaling(machine["usable_cpus"])
            targets = [evaluate_target(t, by_name, machine["usable_cpus"]) for t in workload.targets]
            results.append(
                WorkloadResult(
                    workload.name,
                    workload.description,
                    case_results,
                    targets,
                    workload.processes_note,
                    time.perf_counter() - begin,
                    effective_cpus=(cores_before, cores_after),
                    memory_scaling=(bandwidth_before, bandwidth_after),
                )
            )
    scale_info = {"name": scale.name, "warmup": scale.warmup, "epochs": scale.epochs}
    return result_to_json(results, machine=machine, scale=scale_info, command=command, started=started)
