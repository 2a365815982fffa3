"""Worker processes (``ThreadLoader(worker_processes=P)``) beside threads and torch's workers.

    python -m benchmarks.processes [--items 1024] [--repeats 5] [--seconds 3] [--parts jitter,memory]

Six measurements, each side by side in one run:

1. Throughput on ``python_cpu``'s pure-Python tokenising (it holds the GIL): in-process
   threads (``num_workers=2``), ``worker_processes=2`` (one thread each), and torch's
   ``DataLoader(num_workers=2)`` with and without persistent workers. Epochs are interleaved
   round by round (one warm-up epoch each first); ratios to torch's best configuration are
   taken per round, and the median and the range over rounds are shown.
2. Both: items that wait 5 ms (I/O) and then tokenise (pure Python): many threads in this
   process, 2 processes of 8 threads, torch with 16 and 2 worker processes.
3. Time to the first batch: a new loader (its processes start), and a later epoch (persistent
   processes already running), beside torch's (fork start, persistent workers).
3b. Time to the first batch with spawn (``--parts spawn``): a fresh loader each time, torch's
   ``DataLoader(num_workers=2, multiprocessing_context="spawn")``, ThreadLoader's 2 threads, and
   ``worker_processes=2`` started by spawn and by forkserver (the default), for a dataset that
   carries 0 and 64 MiB of Python strings (pickled to every spawned worker); per-round ratios to
   torch's, median and range.
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

The machine's CPUs are shared (see ``docs/processes.md`` for the published run and its noise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader

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


def epoch_time(loader: Iterable[Any]) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - start


def close(loader: Any) -> None:
    if isinstance(loader, ThreadLoader):
        loader.close()


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def throughput(items: int, repeats: int) -> None:
    made = {name: make() for name, make in loaders(items).items()}
    try:
        for loader in made.values():
            epoch_time(loader)  # warm-up: processes started, imports done
        times: dict[str, list[float]] = {name: [] for name in made}
        for _ in range(repeats):
            for name, loader in made.items():
                times[name].append(epoch_time(loader))
    finally:
        for loader in made.values():
            close(loader)
    torch_names = [n for n in made if n.startswith("torch")]
    best_torch = [min(times[n][r] for n in torch_names) for r in range(repeats)]
    print(f"\n## python_cpu throughput: {items} items, batch {BATCH}, {repeats} interleaved rounds\n")
    print("| configuration | items/s, median (range) | x torch's best, median (range) |")
    print("|---|---|---|")
    for name, ts in times.items():
        rates = [items / t for t in ts]
        ratios = [best_torch[r] / ts[r] for r in range(repeats)]
        print(f"| {name} | {spread(rates, 0)} | {spread(ratios)} |")


class WaitThenTokenize(TokenizeDataset):
    """An I/O wait (``time.sleep``, 5 ms, which releases the GIL) then ``python_cpu``'s
    pure-Python tokenising: work that wants many loads in flight and more than one GIL."""

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.005)
        return super().__getitem__(index)


def both(items: int, repeats: int) -> None:
    ds = WaitThenTokenize(items)
    made: dict[str, Any] = {
        "threads (num_workers=16)": ThreadLoader(ds, batch_size=BATCH, num_workers=16, persistent_workers=True),
        "worker_processes=2 x num_workers=8": ThreadLoader(ds, batch_size=BATCH, num_workers=8, worker_processes=2),
        "torch num_workers=16 persistent": DataLoader(ds, batch_size=BATCH, num_workers=16, persistent_workers=True),
        "torch num_workers=2 persistent": DataLoader(ds, batch_size=BATCH, num_workers=2, persistent_workers=True),
    }
    try:
        for loader in made.values():
            epoch_time(loader)
        times: dict[str, list[float]] = {name: [] for name in made}
        for _ in range(repeats):
            for name, loader in made.items():
                times[name].append(epoch_time(loader))
    finally:
        for loader in made.values():
            close(loader)
    print(f"\n## Both: 5 ms of I/O wait, then pure-Python tokenising; {items} items, {repeats} rounds\n")
    print("| configuration | items/s, median (range) |")
    print("|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {spread([items / t for t in ts], 0)} |")


def first_batch(items: int, repeats: int) -> None:
    ds = TokenizeDataset(items)
    rows: dict[str, list[float]] = {k: [] for k in ("ours new", "ours later", "torch new", "torch later")}
    for _ in range(repeats):
        start = time.perf_counter()
        ours = ThreadLoader(ds, batch_size=BATCH, num_workers=1, worker_processes=2)
        it = iter(ours)
        next(it)
        rows["ours new"].append(time.perf_counter() - start)
        del it
        start = time.perf_counter()
        it = iter(ours)
        next(it)
        rows["ours later"].append(time.perf_counter() - start)
        del it
        ours.close()
        start = time.perf_counter()
        theirs = DataLoader(ds, batch_size=BATCH, num_workers=2, persistent_workers=True)
        tit = iter(theirs)
        next(tit)
        rows["torch new"].append(time.perf_counter() - start)
        del tit
        start = time.perf_counter()
        tit = iter(theirs)
        next(tit)
        rows["torch later"].append(time.perf_counter() - start)
        del tit, theirs
    print(f"\n## Time to the first batch (ms), {repeats} rounds\n")
    print("| | new loader, median (range) | later epoch, median (range) |")
    print("|---|---|---|")
    for who, label in (
        ("ours", "worker_processes=2 (forkserver)"),
        ("torch", "torch num_workers=2 (fork), persistent"),
    ):
        new = [1000 * t for t in rows[f"{who} new"]]
        later = [1000 * t for t in rows[f"{who} later"]]
        print(f"| {label} | {spread(new, 0)} | {spread(later, 0)} |")


class Carrying(TokenizeDataset):
    """``python_cpu``'s dataset also holding ``mib`` MiB of Python strings (1 KiB each): what a
    worker started by spawn or forkserver receives pickled before its first item."""

    def __init__(self, items: int, mib: int) -> None:
        super().__init__(items)
        self.payload = [f"{i:08d}" + "x" * 1016 for i in range(mib * 1024)]


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
    it = iter(loader)
    next(it)
    took = time.perf_counter() - start
    del it  # torch's non-persistent workers are joined here
    close(loader)
    return took


def spawn_first_batch(items: int, repeats: int, sizes: tuple[int, ...] = (0, 64)) -> None:
    """Time to the first batch of a fresh loader whose workers start with spawn (torch's, and
    ThreadLoader's worker processes) beside threads, for a dataset carrying 0 and 64 MiB of
    strings. Configurations interleaved per round; one warm-up round first (imports, and the
    forkserver's server, which later loaders of the process reuse)."""
    datasets = {mib: Carrying(items, mib) for mib in sizes}
    for make in spawn_loaders(datasets[sizes[0]]).values():
        fresh_first_batch(make)
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):
        for mib, ds in datasets.items():
            for name, make in spawn_loaders(ds).items():
                times.setdefault((name, mib), []).append(fresh_first_batch(make))
    names = list(spawn_loaders(datasets[sizes[0]]))
    print(f"\n## Time to the first batch of a fresh loader, spawned workers (ms), {repeats} interleaved rounds\n")
    header = " | ".join(f"{mib} MiB dataset, median (range) | x torch spawn" for mib in sizes)
    print(f"| configuration | {header} |")
    print("|---|" + "---|---|" * len(sizes))
    for name in names:
        cells = []
        for mib in sizes:
            ours, theirs = times[(name, mib)], times[(names[0], mib)]
            ratios = [theirs[r] / ours[r] for r in range(repeats)]
            cells.append(f"{spread([1000 * t for t in ours], 0)} | {spread(ratios)}")
        print(f"| {name} | {' | '.join(cells)} |")


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


def jitter(items: int, seconds: float) -> None:
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
            epoch_time(loader)  # threads and processes started
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
    print(f"\n## Training-step jitter: {seconds:.0f} s of steps per row\n")
    print("| loader | step p50 (ms) | step p99 (ms) | p99 x idle | batches/s consumed |")
    print("|---|---|---|---|---|")
    idle_p99 = 0.0
    for name, (times, rate) in rows.items():
        qs = statistics.quantiles(times, n=100)
        p50, p99 = 1000 * statistics.median(times), 1000 * qs[98]
        idle_p99 = idle_p99 or p99
        consumed = f"{rate:.0f}" if rate else "-"
        print(f"| {name} | {p50:.2f} | {p99:.2f} | {p99 / idle_p99:.1f} | {consumed} |")


MEMORY_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "threads (num_workers=2)": ("threadloader", {"num_workers": 2}),
    "worker_processes=1 (2 threads there)": ("threadloader", {"num_workers": 2, "worker_processes": 1}),
    "worker_processes=2 (1 thread each)": ("threadloader", {"num_workers": 1, "worker_processes": 2}),
    "torch num_workers=2 (fork)": ("torch", {"num_workers": 2}),
}


def memory(items: int) -> None:
    print(f"\n## Memory: {items:,} Python strings, one epoch, batch {BATCH}, each row in a fresh process\n")
    print(
        "| configuration | dataset (MiB) | tree peak above it (MiB) | tree peak PSS (MiB) | tree peak RSS (MiB) | processes | epoch (s) |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, (runner, options) in MEMORY_CONFIGS.items():
        spec = {
            "factory": "benchmarks.workloads.memory:make_dataset",
            "items": items,
            "batch_size": BATCH,
            "loader_options": {},
            "options": options,
            "runner": runner,
        }
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks._memory_probe", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            print(f"| {label} | failed: {done.stderr.strip().splitlines()[-1:]} |")
            continue
        m = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"| {label} | {m['dataset_mib']:.0f} | {m['above_dataset_mib']:.0f} | {m['peak_tree_pss_mib']:.0f} "
            f"| {m['peak_tree_rss_mib']:.0f} | {m['worker_processes']} | {m['seconds']:.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--memory-items", type=int, default=2_000_000, help="0 leaves the memory rows out")
    parts = ("throughput", "both", "first_batch", "spawn", "jitter", "memory")
    parser.add_argument("--parts", default=",".join(parts), help=f"a comma-separated subset of {', '.join(parts)}")
    args = parser.parse_args()
    chosen = set(args.parts.split(","))
    if chosen - set(parts):
        parser.error(f"--parts: unknown {sorted(chosen - set(parts))}; choose from {', '.join(parts)}")
    torch.set_num_threads(1)  # the training stand-in's ops on one thread, as the loader's are
    print(f"CPUs available: {len(os.sched_getaffinity(0))}; load average before: {os.getloadavg()[0]:.1f}")
    if "throughput" in chosen:
        throughput(args.items, args.repeats)
    if "both" in chosen:
        both(args.items, args.repeats)
    if "first_batch" in chosen:
        first_batch(args.items, args.repeats)
    if "spawn" in chosen:
        spawn_first_batch(args.items, args.repeats)
    if "jitter" in chosen:
        jitter(args.items, args.seconds)
    if args.memory_items and "memory" in chosen:
        memory(args.memory_items)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
