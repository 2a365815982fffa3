"""Worker processes (``ThreadLoader(worker_processes=P)``) beside threads and torch's workers.

    python -m benchmarks processes [--items 1024] [--repeats 5] [--seconds 3] [--memory-items M] [--parts jitter,memory] [--smoke]

Six measurements, each side by side in one run:

1. Throughput on ``python_cpu``'s pure-Python tokenising (it holds the GIL): in-process
   threads (``num_workers=2``), ``worker_processes=2`` (one thread each), and torch's
   ``DataLoader(num_workers=2)`` with and without persistent workers. Epochs are interleaved
   round by round (one warm-up epoch each first); ratios to torch's best configuration are
   taken per round.
2. Both: items that wait 5 ms (I/O) and then tokenise (pure Python): many threads in this
   process, 2 processes of 8 threads, torch with 16 and 2 worker processes.
3. Time to the first batch: a new loader (its processes start), and a later epoch (persistent
   processes already running), beside torch's (fork start, persistent workers).
3b. Time to the first batch with spawn (``--parts spawn``): a fresh loader each time, torch's
   ``DataLoader(num_workers=2, multiprocessing_context="spawn")``, ThreadLoader's 2 threads, and
   ``worker_processes=2`` started by spawn and by forkserver (the default), for a dataset that
   carries 0 and 64 MiB of Python strings (pickled to every spawned worker); per-round ratios to
   torch's.
4. A training-step jitter meter: the consuming thread runs a fixed step (a few small matmuls
   and a Python loop) for ``--seconds`` after each batch; the p50/p99 of the step's own time,
   with no loader, with the loader's threads in this process (at the default priority, and at
   nice 10), and with ``worker_processes=1`` (default, and ``process_nice=10``), beside the
   batches per second each delivered; then, with two CPUs or more, the training thread on the
   first CPU and the loader on the last (threads through ``worker_init_fn``, the process
   through ``process_affinity``).
5. Memory: the peak PSS and RSS of the whole process tree (``benchmarks._memory_probe``, each
   configuration in a fresh process) for ``workloads/memory.py``'s dataset of 2 million Python
   strings (``--memory-items``), one epoch, above the process holding just the dataset.

Each part records its figures as results; the load average before and after is recorded too.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from benchmarks._memory_probe import record as record_memory
from benchmarks.datasets import CarryingDataset, WaitThenTokenize
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import close, fresh_process, interleave, quantile, ratios, time_epoch
from benchmarks.workloads.python_cpu import TokenizeDataset
from torch_threadloader import ThreadLoader

BATCH = 32


def loaders(items: int) -> dict[str, Callable[[], Any]]:
    ds = TokenizeDataset(items)
    return {
        "threads (num_workers=2)": lambda: ThreadLoader(ds, batch_size=BATCH, num_workers=2, persistent_workers=True),
        "worker_processes=2 (1 thread each)": lambda: ThreadLoader(
            ds, batch_size=BATCH, num_workers=1, worker_processes=2
        ),
        "torch num_workers=2 persistent": lambda: DataLoader(
            ds, batch_size=BATCH, num_workers=2, persistent_workers=True
        ),
        "torch num_workers=2": lambda: DataLoader(ds, batch_size=BATCH, num_workers=2),
    }


def _epochs(recorder: Recorder, case: str, made: dict[str, Any], items: int, repeats: int) -> dict[str, list[float]]:
    """Epoch times of each loader, interleaved round by round after a warm-up epoch each
    (processes started, imports done); records items/s per round."""
    try:
        runs = {name: functools.partial(time_epoch, loader) for name, loader in made.items()}
        times = {name: [t.wall for t in ts] for name, ts in interleave(runs, repeats, order="fixed").items()}
    finally:
        for loader in made.values():
            close(loader)
    for name, ts in times.items():
        recorder.add(case, name, "items/s", [items / t for t in ts], "items/s", items=items, batch_size=BATCH)
    return times


def throughput(recorder: Recorder, items: int, repeats: int) -> None:
    made = {name: make() for name, make in loaders(items).items()}
    case = "python_cpu throughput"
    times = _epochs(recorder, case, made, items, repeats)
    torch_names = [n for n in made if n.startswith("torch")]
    best_torch = [min(times[n][r] for n in torch_names) for r in range(repeats)]
    for name, ts in times.items():
        recorder.add(case, name, "x torch's best", ratios(best_torch, ts), "x")


def both(recorder: Recorder, items: int, repeats: int) -> None:
    ds = WaitThenTokenize(items)
    made: dict[str, Any] = {
        "threads (num_workers=16)": ThreadLoader(ds, batch_size=BATCH, num_workers=16, persistent_workers=True),
        "worker_processes=2 x num_workers=8": ThreadLoader(ds, batch_size=BATCH, num_workers=8, worker_processes=2),
        "torch num_workers=16 persistent": DataLoader(ds, batch_size=BATCH, num_workers=16, persistent_workers=True),
        "torch num_workers=2 persistent": DataLoader(ds, batch_size=BATCH, num_workers=2, persistent_workers=True),
    }
    _epochs(recorder, "5 ms of I/O wait, then pure-Python tokenising", made, items, repeats)


def _first_batch(loader: Any) -> float:
    """Seconds from ``iter()`` to the first batch of ``loader`` (the iterator is dropped after)."""
    start = time.perf_counter()
    it = iter(loader)
    next(it)
    took = time.perf_counter() - start
    del it
    return took


def first_batch(recorder: Recorder, items: int, repeats: int) -> None:
    ds = TokenizeDataset(items)
    ours, theirs = "worker_processes=2 (forkserver)", "torch num_workers=2 (fork), persistent"
    rows: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):
        start = time.perf_counter()
        loader: Any = ThreadLoader(ds, batch_size=BATCH, num_workers=1, worker_processes=2)
        rows.setdefault((ours, "new loader"), []).append(time.perf_counter() - start + _first_batch(loader))
        rows.setdefault((ours, "later epoch"), []).append(_first_batch(loader))
        loader.close()
        start = time.perf_counter()
        loader = DataLoader(ds, batch_size=BATCH, num_workers=2, persistent_workers=True)
        rows.setdefault((theirs, "new loader"), []).append(time.perf_counter() - start + _first_batch(loader))
        rows.setdefault((theirs, "later epoch"), []).append(_first_batch(loader))
        del loader
    for (config, when), values in rows.items():
        recorder.add("time to the first batch", config, when, [1000 * t for t in values], "ms", items=items)


def spawn_loaders(ds: TokenizeDataset) -> dict[str, Callable[[], Any]]:
    return {
        "torch num_workers=2, spawn": lambda: DataLoader(
            ds, batch_size=BATCH, num_workers=2, multiprocessing_context="spawn"
        ),
        "ThreadLoader threads (num_workers=2)": lambda: ThreadLoader(ds, batch_size=BATCH, num_workers=2),
        "ThreadLoader worker_processes=2, spawn": lambda: ThreadLoader(
            ds, batch_size=BATCH, num_workers=1, worker_processes=2, multiprocessing_context="spawn"
        ),
        "ThreadLoader worker_processes=2, forkserver (default)": lambda: ThreadLoader(
            ds, batch_size=BATCH, num_workers=1, worker_processes=2
        ),
    }


def fresh_first_batch(make: Callable[[], Any]) -> float:
    """Seconds from making the loader to its first batch; the loader is closed after."""
    start = time.perf_counter()
    loader = make()
    took = time.perf_counter() - start + _first_batch(loader)  # torch's non-persistent workers are joined
    close(loader)
    return took


def spawn_first_batch(recorder: Recorder, items: int, repeats: int, sizes: tuple[int, ...] = (0, 64)) -> None:
    """Time to the first batch of a fresh loader whose workers start with spawn (torch's, and
    ThreadLoader's worker processes) beside threads, for a dataset carrying 0 and 64 MiB of
    strings. Configurations interleaved per round; one warm-up round first (imports, and the
    forkserver's server, which later loaders of the process reuse)."""
    datasets = {mib: CarryingDataset(items, mib) for mib in sizes}
    runs = {
        (name, mib): functools.partial(fresh_first_batch, make)
        for mib, ds in datasets.items()
        for name, make in spawn_loaders(ds).items()
    }
    times = interleave({f"{n}|{m}": run for (n, m), run in runs.items()}, repeats, order="fixed")
    names = list(spawn_loaders(datasets[sizes[0]]))
    for name, mib in runs:
        ours, theirs = times[f"{name}|{mib}"], times[f"{names[0]}|{mib}"]
        case = f"first batch of a fresh loader, spawned workers, {mib} MiB dataset"
        recorder.add(case, name, "time to the first batch", [1000 * t for t in ours], "ms", items=items, mib=mib)
        recorder.add(case, name, "x torch spawn", ratios(theirs, ours), "x")


A = torch.randn(96, 96)


def step() -> None:
    """A training-step stand-in: a few small matmuls and a Python loop (about 2 ms here)."""
    x = A
    for _ in range(4):
        x = torch.tanh(x @ A)
    total = 0
    for i in range(40000):
        total += i & 7


def steps(batches: Iterable[Any] | None, seconds: float) -> tuple[list[float], float]:
    times: list[float] = []
    end = time.perf_counter() + seconds
    count = 0
    start = time.perf_counter()
    source = iter(batches) if batches is not None else None
    while time.perf_counter() < end:
        if source is not None:
            try:
                next(source)
            except StopIteration:
                source = iter(batches)  # type: ignore[arg-type]
                next(source)
            count += 1
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times, count / (time.perf_counter() - start)


def lower_this_thread(worker_id: int) -> None:
    """``worker_init_fn``: nice 10 for the calling thread only (Linux nice levels are per thread)."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


def last_cpu_only(worker_id: int) -> None:
    """``worker_init_fn``: the calling thread runs on the last CPU only (Linux affinity is per thread)."""
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def jitter(recorder: Recorder, items: int, seconds: float) -> None:
    ds = TokenizeDataset(items)
    cpus = sorted(os.sched_getaffinity(0))
    # With affinity: the training thread on the first CPU, the loader on the last.
    pinned = {
        "threads pinned to the last CPU, step on the first": ThreadLoader(
            ds, batch_size=BATCH, num_workers=2, persistent_workers=True, worker_init_fn=last_cpu_only
        ),
        "worker_processes=1 on the last CPU, step on the first": ThreadLoader(
            ds, batch_size=BATCH, num_workers=2, worker_processes=1, process_affinity=cpus[-1:]
        ),
    }
    loaders = {
        "threads in this process (num_workers=2)": ThreadLoader(
            ds, batch_size=BATCH, num_workers=2, persistent_workers=True
        ),
        "the same threads at nice 10": ThreadLoader(
            ds, batch_size=BATCH, num_workers=2, persistent_workers=True, worker_init_fn=lower_this_thread
        ),
        "worker_processes=1 (2 threads there)": ThreadLoader(ds, batch_size=BATCH, num_workers=2, worker_processes=1),
        "worker_processes=1, process_nice=10": ThreadLoader(
            ds, batch_size=BATCH, num_workers=2, worker_processes=1, process_nice=10
        ),
    }
    if len(cpus) < 2:
        pinned = {}
    try:
        for loader in (*loaders.values(), *pinned.values()):
            time_epoch(loader)  # threads and processes started
        rows = {"no loader (idle)": steps(None, seconds)}
        for name, loader in loaders.items():
            rows[name] = steps(loader, seconds)
        if pinned:
            os.sched_setaffinity(0, cpus[:1])  # this (the training) thread only
            try:
                rows["no loader, step on the first CPU"] = steps(None, seconds)
                for name, loader in pinned.items():
                    rows[name] = steps(loader, seconds)
            finally:
                os.sched_setaffinity(0, cpus)
    finally:
        for loader in (*loaders.values(), *pinned.values()):
            loader.close()
    rows_ms = {name: [1000 * t for t in times] for name, (times, _) in rows.items()}
    idle = "no loader (idle)"
    for name, (times, rate) in rows.items():
        steps_ms = [1000 * t for t in times]
        case = f"training-step jitter, {seconds:g} s of steps"
        recorder.add(case, name, "step", steps_ms, "ms", seconds=seconds)
        recorder.add(case, name, "step p99 x idle", [quantile(steps_ms, 0.99) / quantile(rows_ms[idle], 0.99)], "x")
        if rate:
            recorder.add(case, name, "batches/s consumed", [rate], "batches/s")


MEMORY_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "threads (num_workers=2)": ("threadloader", {"num_workers": 2}),
    "worker_processes=1 (2 threads there)": ("threadloader", {"num_workers": 2, "worker_processes": 1}),
    "worker_processes=2 (1 thread each)": ("threadloader", {"num_workers": 1, "worker_processes": 2}),
    "torch num_workers=2 (fork)": ("torch", {"num_workers": 2}),
}


def memory(recorder: Recorder, items: int) -> None:
    case = f"memory: {items:,} Python strings, one epoch, each configuration in a fresh process"
    for label, (runner, options) in MEMORY_CONFIGS.items():
        spec = {
            "factory": "benchmarks.workloads.memory:make_dataset",
            "items": items,
            "batch_size": BATCH,
            "loader_options": {},
            "options": options,
            "runner": runner,
        }
        m = fresh_process("benchmarks._memory_probe", [json.dumps(spec)])
        record_memory(recorder, case, label, m, items=items)
        recorder.add(case, label, "processes", [m["worker_processes"]], "")
        recorder.add(case, label, "epoch", [m["seconds"]], "s")


PARTS = ("throughput", "both", "first_batch", "spawn", "jitter", "memory")


def main(argv: Sequence[str] | None = None, *, suite: str = "processes") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--memory-items", type=int, default=2_000_000, help="0 leaves the memory rows out")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"a comma-separated subset of {', '.join(PARTS)}")
    args = parser.parse_args(argv)
    chosen = set(args.parts.split(","))
    if chosen - set(PARTS):
        parser.error(f"--parts: unknown {sorted(chosen - set(PARTS))}; choose from {', '.join(PARTS)}")
    if args.smoke:
        args.items, args.repeats, args.seconds, args.memory_items = 64, 1, 0.2, 2_000
    torch.set_num_threads(1)  # the training stand-in's ops on one thread, as the loader's are
    recorder = Recorder(suite, argv)
    load_before = os.getloadavg()[0]
    if "throughput" in chosen:
        throughput(recorder, args.items, args.repeats)
    if "both" in chosen:
        both(recorder, args.items, args.repeats)
    if "first_batch" in chosen:
        first_batch(recorder, args.items, args.repeats)
    if "spawn" in chosen:
        spawn_first_batch(recorder, args.items, args.repeats, (0, 1) if args.smoke else (0, 64))
    if "jitter" in chosen:
        jitter(recorder, args.items, args.seconds)
    if args.memory_items and "memory" in chosen:
        memory(recorder, args.memory_items)
    cpus = len(os.sched_getaffinity(0))
    recorder.add(
        "machine", "this process", "load average, before and after", [load_before, os.getloadavg()[0]], "", cpus=cpus
    )
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
