"""The benchmark harness: loader configurations, interleaved timing, statistics and targets.

A *workload* (one module in :mod:`benchmarks.workloads`) writes its per-item
work once, as a dataset, and lists *cases*; each case names the loader *configurations* that
run it: ``ThreadLoader`` ones, ``torch.utils.data.DataLoader`` with ``num_workers`` 0, N and N
with persistent workers, and optionally the work in a plain loop with no loader at all.

How a case is measured (``mode``):

* ``"epoch"``: every configuration gets a loader, made once. Then, for ``warmup + epochs``
  rounds, each configuration runs one whole epoch, in an order shuffled per round, so the
  configurations share the machine's slow and fast moments (the interleaving). A timed epoch
  is ``for batch in loader`` from before ``iter()`` to after ``StopIteration``: forking
  worker processes, starting threads, the last batch and shutting workers down all count.
  Warm-up rounds are run and dropped.
* ``"startup"``: each round makes a fresh loader per configuration and times ``iter()`` to
  the first batch, then again for the second epoch of the same loader.
* ``"memory"``: each configuration runs in a fresh Python process
  (:mod:`benchmarks._memory_probe`), which measures the peak memory of its
  whole process tree, worker processes included.

Every epoch must yield exactly ``case.items`` items, or the run fails: a loader that drops
items is not faster.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from torch.utils.data import DataLoader

from benchmarks import timing as timing_module
from benchmarks._memory_probe import descendants

__all__ = [
    "SCALES",
    "Case",
    "CaseResult",
    "Config",
    "ConfigResult",
    "Metric",
    "Scale",
    "Target",
    "Workload",
    "WorkloadResult",
    "count_items",
    "evaluate_target",
    "plain",
    "run_case",
    "threadloader",
    "torch_configs",
]

Runner = Literal["threadloader", "torch", "plain"]
Mode = Literal["epoch", "startup", "memory"]
Metric = Literal["speedup", "first_batch", "first_batch_second_epoch", "ceiling_fraction", "mib_above_dataset"]
Progress = Callable[[int], None]
T = TypeVar("T")


@dataclass(frozen=True)
class Scale:
    """How big a run is: ``full`` for the published numbers, ``quick`` for about a minute,
    ``smoke`` for the test suite (tiny sizes, one epoch: it proves the harness runs, nothing
    about speed)."""

    name: Literal["full", "quick", "smoke"]
    warmup: int
    epochs: int

    def pick(self, full: int, quick: int, smoke: int) -> int:
        """The size for this scale."""
        return {"full": full, "quick": quick, "smoke": smoke}[self.name]


SCALES: dict[str, Scale] = {
    "full": Scale("full", warmup=1, epochs=5),
    "quick": Scale("quick", warmup=1, epochs=2),
    "smoke": Scale("smoke", warmup=0, epochs=1),
}


@dataclass(frozen=True)
class Config:
    """One way to load a case: a loader class (``runner``) and its keyword arguments.

    ``dataset`` picks one of the case's datasets (a workload may write the same work twice
    only where the two loaders need different code: blocking vs ``async def``).
    """

    label: str
    runner: Runner
    options: Mapping[str, Any] = field(default_factory=dict)
    dataset: str = "default"


def threadloader(label: str = "", *, dataset: str = "default", **options: Any) -> Config:
    """A ``ThreadLoader`` configuration, labelled from its options unless ``label`` is given."""
    if not label:
        parts = [f"nw={options.get('num_workers', 0)}"]
        if options.get("item_concurrency", 1) != 1:
            parts.append(f"ic={options['item_concurrency']}")
        if options.get("persistent_workers"):
            parts.append("persistent")
        if dataset != "default":
            parts.append(dataset)
        label = "ThreadLoader " + " ".join(parts)
    return Config(label, "threadloader", dict(options), dataset)


def torch_configs(num_workers: int, *, persistent: bool = True, dataset: str = "default") -> list[Config]:
    """``torch.utils.data.DataLoader`` with 0, ``num_workers``, and ``num_workers``
    persistent worker processes (forked: the default start method on Linux)."""
    configs = [
        Config("torch nw=0", "torch", {"num_workers": 0}, dataset),
        Config(f"torch nw={num_workers}", "torch", {"num_workers": num_workers}, dataset),
    ]
    if persistent:
        configs.append(
            Config(
                f"torch nw={num_workers} persistent",
                "torch",
                {"num_workers": num_workers, "persistent_workers": True},
                dataset,
            )
        )
    return configs


def plain(label: str = "", *, torch_threads: int | None = 1, threads: int = 1, dataset: str = "default") -> Config:
    """The per-item work and the collate in a plain loop: no loader, no bound, nothing but the
    work. ``threads=1`` runs it in the caller's thread; with ``torch_threads`` set, torch's
    intra-op threads are limited to that many while it runs, so the rate is truly that of one
    thread. ``threads=N`` runs it on N fresh threads, each with one intra-op thread (as a
    loader's workers have), which take batches in turn and hand them over through one
    unbounded ``queue.SimpleQueue``: the most N threads can do, the ceiling of any thread
    loader for the work."""
    label = label or f"no loader, {threads} thread{'s' if threads > 1 else ''}"
    return Config(label, "plain", {"torch_threads": torch_threads, "threads": threads}, dataset)


def gather(in_flight: int, *, dataset: str = "async") -> Config:
    """An async dataset's items in a bare ``asyncio.gather``, at most ``in_flight`` awaited at
    once (a semaphore, items in index order), then collated: no loader, no thread hand-over,
    the ceiling of any async loader for the work. One event loop (``asyncio.Runner``) for every
    epoch, as a loader that keeps its loop (connections stay open); the dataset's ``aclose()``
    is awaited on it when the loop is closed."""
    label = f"no loader, asyncio gather {in_flight}" + ("" if dataset == "async" else f", {dataset}")
    return Config(label, "plain", {"gather": in_flight}, dataset)


def count_items(batch: Any) -> int:
    """Items in a default-collated batch: the length of its first dimension (a tensor, a list,
    or the first field of a tuple or dict batch)."""
    kind = type(batch)  # the common cases first, as cheaply as they go: this runs once per batch
    if kind is torch.Tensor:
        return int(batch.shape[0])  # not len(): Tensor.__len__ runs Python code
    if kind is list:
        return len(batch)
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, Mapping):
        return count_items(next(iter(batch.values())))
    if isinstance(batch, tuple) and batch and not isinstance(batch[0], str | bytes | int | float):
        return count_items(batch[0])
    return len(batch)


@dataclass
class Case:
    """One measured situation of a workload, e.g. ``overhead`` at ``bs=32``."""

    name: str
    configs: Sequence[Config]
    items: int
    batch_size: int
    datasets: Mapping[str, Any] = field(default_factory=dict)
    collate_fn: Callable[[list[Any]], Any] | None = None
    loader_options: Mapping[str, Any] = field(default_factory=dict)
    mode: Mode = "epoch"
    count: Callable[[Any], int] = count_items
    #: Rounds (fresh loaders) for ``startup``; None: the scale's warm-up + epochs.
    rounds: int | None = None
    #: ``"module:function"`` that builds the dataset of ``items`` items in a fresh process
    #: (``memory`` mode).
    memory_factory: str = ""
    notes: str = ""
    #: Processes of the workload itself (a server) whose CPU time is not the loader's.
    helper_pids: tuple[int, ...] = ()
    #: Facts the workload records while or after the case runs (e.g. requests served).
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """A goal from the issue, checked against the measurements of one run.

    ``metric``: ``speedup`` is the median epoch time of the best ``baselines`` configuration
    over that of ``config`` (> 1: ThreadLoader is faster); ``first_batch`` and
    ``first_batch_second_epoch`` the same for the time from ``iter()`` to the first batch;
    ``ceiling_fraction`` is ``config``'s rate over ``cpus x`` the rate of the single-thread
    ``baselines[0]`` (the most the machine's cores can give); ``mib_above_dataset`` is the
    peak memory of ``config``'s process tree above the process holding just the dataset
    (lower is better). Empty ``baselines``: every torch configuration of the case.
    """

    label: str
    case: str
    config: str
    metric: Metric
    threshold: float
    baselines: tuple[str, ...] = ()

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "mib_above_dataset"


@dataclass(frozen=True)
class Workload:
    """A workload: its per-item work lives in ``cases`` (a context manager that makes the
    datasets, files and servers, and removes them on exit)."""

    name: str
    description: str
    cases: Callable[[Scale, Path], AbstractContextManager[list[Case]]]
    targets: Sequence[Target] = ()
    #: Where worker processes win, and why; shown with the results.
    processes_note: str = ""


@dataclass
class ConfigResult:
    label: str
    runner: Runner
    options: dict[str, Any]
    seconds: list[float] = field(default_factory=list)  # epoch times, or first-batch times (startup)
    second_epoch: list[float] = field(default_factory=list)  # startup: first batch of epoch 2
    cpu_seconds: list[float] = field(default_factory=list)  # CPU of the process tree per timed epoch
    minor_faults: list[int] = field(default_factory=list)  # the process tree's minor page faults per timed epoch
    memory: dict[str, Any] = field(default_factory=dict)

    def median(self, which: Literal["seconds", "second_epoch"] = "seconds") -> float:
        values = getattr(self, which)
        return statistics.median(values) if values else float("nan")


@dataclass
class CaseResult:
    name: str
    mode: Mode
    items: int
    batch_size: int
    configs: dict[str, ConfigResult]
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. HTTP requests served
    notes: str = ""

    def torch_labels(self) -> list[str]:
        return [label for label, result in self.configs.items() if result.runner == "torch"]


@dataclass
class WorkloadResult:
    name: str
    description: str
    cases: list[CaseResult]
    targets: list[dict[str, Any]]
    processes_note: str
    seconds: float
    #: :func:`~benchmarks.suite.effective_cpus` before and after the workload.
    effective_cpus: tuple[float, float] = (float("nan"), float("nan"))
    #: :func:`~benchmarks.suite.memory_scaling` before and after the workload.
    memory_scaling: tuple[float, float] = (float("nan"), float("nan"))


# -- making and closing loaders ---------------------------------------------------------------


class PlainLoop:
    """The case's work in a plain loop, batch by batch in index order, in the calling thread
    (``threads=1``), or on ``threads`` plain threads, in completion order (see :func:`plain`)."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        collate_fn: Callable[[list[Any]], Any] | None,
        torch_threads: int | None,
        threads: int = 1,
        gather: int = 0,
    ) -> None:
        from torch.utils.data import default_collate

        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = collate_fn or default_collate
        self.torch_threads = torch_threads
        self.threads = threads
        self.gather = gather
        self._runner: asyncio.Runner | None = None

    def _gathered(self) -> Iterator[Any]:
        dataset, size = self.dataset, self.batch_size

        async def main() -> list[Any]:
            semaphore = asyncio.Semaphore(self.gather)

            async def one(i: int) -> Any:
                async with semaphore:
                    return await dataset[i]

            return await asyncio.gather(*(one(i) for i in range(len(dataset))))

        if self._runner is None:
            self._runner = asyncio.Runner()
        items = self._runner.run(main())
        for start in range(0, len(items), size):
            yield self.collate_fn(items[start : start + size])

    def close(self) -> None:
        """Await the dataset's ``aclose()`` on the gather's loop, and close the loop."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        aclose = getattr(self.dataset, "aclose", None)
        try:
            if aclose is not None:
                runner.run(aclose())
        finally:
            runner.close()

    def _batch(self, start: int) -> Any:
        dataset = self.dataset
        return self.collate_fn([dataset[i] for i in range(start, min(start + self.batch_size, len(dataset)))])

    def _threaded(self) -> Iterator[Any]:
        from torch_threadloader.intraop import use_one_intraop_thread

        starts = range(0, len(self.dataset), self.batch_size)
        results: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        default = torch.get_num_threads()
        stop = threading.Event()

        def work(first: int) -> None:
            try:
                use_one_intraop_thread(default)
                for start in starts[first :: self.threads]:
                    if stop.is_set():
                        return
                    results.put((True, self._batch(start)))
            except BaseException as exc:  # raised in the consumer, not lost in a thread
                results.put((False, exc))

        workers = [threading.Thread(target=work, args=(t,), name=f"plain-{t}") for t in range(self.threads)]
        for worker in workers:
            worker.start()
        try:
            for _ in starts:
                ok, value = results.get()
                if not ok:
                    raise value
                yield value
        finally:
            stop.set()
            for worker in workers:
                worker.join()

    def __iter__(self) -> Iterator[Any]:
        if self.gather:
            yield from self._gathered()
            return
        if self.threads > 1:
            yield from self._threaded()
            return
        previous = torch.get_num_threads()
        if self.torch_threads is not None:
            torch.set_num_threads(self.torch_threads)
        try:
            for start in range(0, len(self.dataset), self.batch_size):
                yield self._batch(start)
        finally:
            torch.set_num_threads(previous)


def make_loader(case: Case, config: Config) -> Iterable[Any]:
    """The loader of ``config`` over ``case``'s dataset (``ThreadLoader`` is imported here, so
    the harness's import does not depend on it)."""
    dataset = case.datasets[config.dataset]
    if config.runner == "plain":
        options = config.options
        return PlainLoop(
            dataset,
            case.batch_size,
            case.collate_fn,
            options.get("torch_threads"),
            options.get("threads", 1),
            options.get("gather", 0),
        )
    kwargs: dict[str, Any] = {"batch_size": case.batch_size, **case.loader_options, **config.options}
    if case.collate_fn is not None:
        kwargs["collate_fn"] = case.collate_fn
    if config.runner == "torch":
        return DataLoader(dataset, **kwargs)
    from torch_threadloader import ThreadLoader

    return ThreadLoader(dataset, **kwargs)


def close_loader(loader: Any) -> None:
    """``ThreadLoader.close()``; torch's DataLoader has no ``close()``: its persistent
    workers stop when the loader (and its iterator) is garbage-collected, which the caller
    triggers by dropping its references and collecting."""
    close = getattr(loader, "close", None)
    if callable(close):
        close()


# -- measuring --------------------------------------------------------------------------------


def _check_items(case: Case, config: Config, seen: int) -> None:
    if seen != case.items:
        raise RuntimeError(f"{case.name} / {config.label}: an epoch yielded {seen} items, expected {case.items}")


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

try:
    import resource
except ImportError:  # not on Windows: page faults are then counted as 0
    resource = None  # type: ignore[assignment]


def _live_children_usage(exclude: Sequence[int]) -> tuple[float, int]:
    """CPU seconds and minor page faults so far of this process's live descendants (Linux
    ``/proc``; zeros elsewhere)."""
    ticks = faults = 0
    for child in descendants(os.getpid(), exclude):
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        faults += int(fields[7])  # minflt
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / _CLOCK_TICKS, faults


def tree_usage(exclude: Sequence[int] = ()) -> tuple[float, int]:
    """CPU seconds and minor page faults so far of this process (all threads), its reaped
    children and its live descendants, less the processes in ``exclude`` (a workload's
    server). Children's times have clock-tick resolution (10 ms), so only sums over whole
    epochs mean much. A minor fault is a page the kernel had to map (fresh memory, or a
    copy-on-write copy after a fork): many per item mean the allocator gave memory back."""
    times = os.times()
    children_cpu, faults = _live_children_usage(exclude)
    if resource is not None:
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        faults += resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    return time.process_time() + times.children_user + times.children_system + children_cpu, faults


def time_epoch(loader: Iterable[Any], count: Callable[[Any], int]) -> tuple[float, int]:
    """Seconds for one whole epoch, ``iter()`` included, and the items it yielded."""
    timing = timing_module.time_epoch(loader, count)
    return timing.wall, timing.count


def time_first_batch(loader: Iterable[Any], count: Callable[[Any], int]) -> tuple[float, int]:
    """Seconds from ``iter()`` to the first batch; then drains the epoch (not timed)."""
    start = time.perf_counter()
    iterator = iter(loader)
    batch = next(iterator)
    elapsed = time.perf_counter() - start
    seen = count(batch)
    del batch
    for batch in iterator:
        seen += count(batch)
    return elapsed, seen


def _startup_round(case: Case, config: Config) -> tuple[float, float]:
    """A fresh loader's first batch, and its second epoch's."""
    loader = make_loader(case, config)
    try:
        first, seen = time_first_batch(loader, case.count)
        _check_items(case, config, seen)
        second, seen = time_first_batch(loader, case.count)
        _check_items(case, config, seen)
    finally:
        close_loader(loader)
        del loader
    return first, second


def _epoch_round(case: Case, config: Config, loader: Iterable[Any]) -> tuple[float, float, int]:
    """One whole epoch: its seconds, and the CPU seconds and minor faults of the process tree."""
    cpu_before, faults_before = tree_usage(case.helper_pids)
    elapsed, seen = time_epoch(loader, case.count)
    cpu_after, faults_after = tree_usage(case.helper_pids)
    _check_items(case, config, seen)
    return elapsed, cpu_after - cpu_before, faults_after - faults_before


def _ticking(run: Callable[[], T], tick: Progress) -> Callable[[], T]:
    def ticked() -> T:
        value = run()
        tick(1)
        return value

    return ticked


def run_case(case: Case, scale: Scale, progress: Progress | None = None, seed: int = 0) -> CaseResult:
    """Measure every configuration of ``case`` (see the module docstring for how), in the
    rounds of :func:`benchmarks.timing.interleave`."""
    result = CaseResult(
        case.name,
        case.mode,
        case.items,
        case.batch_size,
        {c.label: ConfigResult(c.label, c.runner, _jsonable(c.options)) for c in case.configs},
        notes=case.notes,
    )
    tick = progress or (lambda n: None)
    if case.mode == "memory":
        for config in case.configs:
            result.configs[config.label].memory = _run_memory_probe(case, config)
            tick(1)
        return result
    if case.mode == "startup":
        rounds = case.rounds if case.rounds is not None else scale.warmup + scale.epochs
        warmup = min(scale.warmup, rounds - 1)
        runs = {c.label: _ticking(functools.partial(_startup_round, case, c), tick) for c in case.configs}
        for label, firsts in timing_module.interleave(runs, rounds - warmup, warmup=warmup, seed=seed).items():
            result.configs[label].seconds = [first for first, _ in firsts]
            result.configs[label].second_epoch = [second for _, second in firsts]
        gc.collect()
        return result
    loaders = {config.label: make_loader(case, config) for config in case.configs}
    try:
        # the previous epoch's young garbage is collected before each, not the whole heap (far slower)
        epochs = {
            c.label: _ticking(functools.partial(_epoch_round, case, c, loaders[c.label]), tick) for c in case.configs
        }
        for label, measured in timing_module.interleave(epochs, scale.epochs, warmup=scale.warmup, seed=seed).items():
            result.configs[label].seconds = [m[0] for m in measured]
            result.configs[label].cpu_seconds = [m[1] for m in measured]
            result.configs[label].minor_faults = [m[2] for m in measured]
    finally:
        for loader in loaders.values():
            close_loader(loader)
        loaders.clear()
        gc.collect()
    return result


def steps(case: Case, scale: Scale) -> int:
    """How many progress steps :func:`run_case` reports for ``case``."""
    if case.mode == "memory":
        return len(case.configs)
    rounds = case.rounds if case.mode == "startup" and case.rounds is not None else scale.warmup + scale.epochs
    return rounds * len(case.configs)


def _run_memory_probe(case: Case, config: Config) -> dict[str, Any]:
    from benchmarks.timing import fresh_process

    spec = {
        "factory": case.memory_factory,
        "items": case.items,
        "batch_size": case.batch_size,
        "runner": config.runner,
        "options": dict(config.options),
        "loader_options": dict(case.loader_options),
    }
    try:
        report: dict[str, Any] = fresh_process("benchmarks._memory_probe", [json.dumps(spec)])
    except RuntimeError as error:
        raise RuntimeError(f"{case.name} / {config.label}: the memory probe failed: {error}") from None
    if report.get("items") != case.items:
        raise RuntimeError(f"{case.name} / {config.label}: the probe saw {report.get('items')} items, not {case.items}")
    return report


def _jsonable(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, bool | int | float | str | type(None)) else repr(v) for k, v in options.items()}


# -- targets ----------------------------------------------------------------------------------


def _best(case: CaseResult, labels: Sequence[str], which: Literal["seconds", "second_epoch"]) -> tuple[str, float]:
    candidates = list(labels) or case.torch_labels()
    medians = {label: case.configs[label].median(which) for label in candidates}
    label = min(medians, key=lambda k: medians[k])
    return label, medians[label]


def evaluate_target(target: Target, cases: Mapping[str, CaseResult], cpus: int) -> dict[str, Any]:
    """The measured value of ``target`` and whether it holds, as a JSON-ready dict."""
    case = cases[target.case]
    mine = case.configs[target.config]
    baseline: str | None
    if target.metric == "mib_above_dataset":
        measured = float(mine.memory["above_dataset_mib"])
        baseline = None
    elif target.metric == "ceiling_fraction":
        baseline = target.baselines[0]
        single = case.items / case.configs[baseline].median()
        measured = (case.items / mine.median()) / (cpus * single)
    else:
        which: Literal["seconds", "second_epoch"] = (
            "second_epoch" if target.metric == "first_batch_second_epoch" else "seconds"
        )
        baseline, best = _best(case, target.baselines, which)
        measured = best / mine.median(which)
    met = measured >= target.threshold if target.higher_is_better else measured < target.threshold
    return {
        "label": target.label,
        "case": target.case,
        "config": target.config,
        "metric": target.metric,
        "threshold": target.threshold,
        "higher_is_better": target.higher_is_better,
        "baseline": baseline,
        "measured": measured,
        "met": bool(met),
    }
