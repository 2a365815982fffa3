"""``python -m torch_threadloader bench MODULE:FACTORY``: time a user's own dataset under
``torch.utils.data.DataLoader`` and under :class:`ThreadLoader` over a small grid of settings,
and say which to use.

``FACTORY`` (a function, called with no arguments) returns a dataset, or a loader whose
dataset, batch size, sampler, ``collate_fn`` and other settings are reused. Each configuration
runs for at most ``batches`` batches or ``seconds`` seconds (epochs are restarted until one is
reached, with ``persistent_workers=True`` when there are workers); the rate is the steady one:
samples per second once the batches prefetched at the start are consumed (the time to an
epoch's first batch, workers' startup included, is reported apart). ThreadLoaders run
with ``stats=True``; the best one's :meth:`ThreadLoader.report` is kept. Every loader is
closed (torch's worker processes too) before the next configuration starts.

See ``docs/tuning.md``.
"""

from __future__ import annotations

import functools
import gc
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, SequentialSampler

__all__ = [
    "BenchResult",
    "DEFAULT_BATCHES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_SECONDS",
    "FactoryError",
    "Progress",
    "Run",
    "Target",
    "bench",
    "default_grid",
    "describe",
    "dumps",
    "format_result",
    "load_target",
    "parse_grid",
]

#: Per configuration: at most this many batches ...
DEFAULT_BATCHES = 100
#: ... or this many seconds, whichever comes first.
DEFAULT_SECONDS = 10.0
#: The batch size when the factory returns a dataset (a loader's own is reused).
DEFAULT_BATCH_SIZE = 32

_GRID_KEYS = ("torch_num_workers", "num_workers", "item_concurrency")


class FactoryError(ValueError):
    """``MODULE:FACTORY`` could not be imported or called, or returned something that is
    neither a dataset nor a loader. The message names the spec; the cause is chained."""


@dataclass
class Target:
    """What to load, and how: the dataset and the loader arguments every configuration shares
    (``num_workers`` and ``item_concurrency`` come from the grid)."""

    spec: str
    dataset: Any
    source: str  # "dataset", "DataLoader" or "ThreadLoader"
    kwargs: dict[str, Any] = field(default_factory=dict)  # shared by both loaders
    torch_kwargs: dict[str, Any] = field(default_factory=dict)  # torch's DataLoader only
    source_num_workers: int | None = None
    source_item_concurrency: int | None = None
    loader: Any = None  # the factory's loader, closed by close()

    def close(self) -> None:
        """Close the loader the factory returned (a ThreadLoader keeps threads); idempotent."""
        close = getattr(self.loader, "close", None)
        if callable(close):
            close()

    @property
    def batch_size(self) -> int | None:
        value = self.kwargs.get("batch_size")
        return value if isinstance(value, int) else None

    @property
    def batching(self) -> str:
        """How items become batches: ``batch_size=N``, ``batch_sampler`` (the loader's own) or
        ``batch_size=None`` (no batching: each item is a batch of one sample)."""
        if "batch_sampler" in self.kwargs:
            return "batch_sampler"
        return f"batch_size={self.batch_size}"

    @property
    def torch_unsupported(self) -> str | None:
        """Why torch's DataLoader cannot run this dataset, or None when it can."""
        from torch_threadloader.fetch import is_async_dataset

        if is_async_dataset(self.dataset):
            return "an async dataset (async def __getitem__) runs only under ThreadLoader"
        return None


@dataclass
class Run:
    """One configuration's measurement. ``samples_per_s`` is the steady rate: samples per
    second after the batches prefetched at the start (``max(num_workers, 1) *
    prefetch_factor``, at most half the run), epoch restarts included; ``startup_s`` the mean
    time from ``iter()`` to an epoch's first batch; ``error`` is ``"Type: message"`` when the
    configuration failed (the others still run)."""

    loader: str  # "DataLoader" or "ThreadLoader"
    num_workers: int
    item_concurrency: int | None
    batches: int = 0
    samples: int = 0
    epochs: int = 0
    seconds: float = 0.0
    startup_s: float | None = None  # mean time to the first batch of an epoch
    samples_per_s: float | None = None
    error: str | None = None
    verdict: str | None = None  # ThreadLoader: the kind of report()'s verdict
    report: str | None = None  # ThreadLoader: report()

    @property
    def label(self) -> str:
        if self.loader == "DataLoader":
            return f"DataLoader(num_workers={self.num_workers})"
        return f"ThreadLoader(num_workers={self.num_workers}, item_concurrency={self.item_concurrency})"


@dataclass
class BenchResult:
    """Every run, the best of each loader, their ratio (ThreadLoader / DataLoader, None when
    either has no rate) and the settings to use."""

    spec: str
    source: str
    batch_size: int | None
    batching: str
    cpus: int
    batches: int
    seconds: float
    runs: list[Run]
    torch_skipped: str | None = None
    grid: dict[str, list[int]] = field(default_factory=dict)

    def best(self, loader: str) -> Run | None:
        rated = [r for r in self.runs if r.loader == loader and r.samples_per_s is not None]
        return max(rated, key=lambda r: r.samples_per_s or 0.0) if rated else None

    @property
    def ratio(self) -> float | None:
        thread, torch_best = self.best("ThreadLoader"), self.best("DataLoader")
        if thread is None or torch_best is None or not torch_best.samples_per_s:
            return None
        return (thread.samples_per_s or 0.0) / torch_best.samples_per_s

    def hint(self) -> str | None:
        """When the best ThreadLoader sits on the edge of the grid and its verdict asks for more
        of that setting: the ``--grid`` to run next; else None."""
        best = self.best("ThreadLoader")
        if best is None or best.verdict is None:
            return None
        wants: list[tuple[str, int]] = []
        if best.verdict in ("fetch-bound", "transform-bound"):  # threads wait on I/O: more in flight
            wants = [("item_concurrency", best.item_concurrency or 1), ("num_workers", best.num_workers)]
        elif best.verdict == "cpu-bound" and best.num_workers < self.cpus:
            wants = [("num_workers", best.num_workers)]
        for key, value in wants:
            values = self.grid.get(key) or [value]
            if value >= max(values):
                bigger = f"{value},{max(value * 2, 2)},{max(value * 4, 4)}"
                return f"{best.verdict} at the grid's largest {key} ({value}): try --grid {key}={bigger}"
        return None

    def settings(self) -> dict[str, Any] | None:
        """The fastest configuration as loader arguments, with a line of code; None when every
        run failed."""
        thread, torch_best = self.best("ThreadLoader"), self.best("DataLoader")
        best = thread
        if torch_best is not None and (thread is None or (torch_best.samples_per_s or 0) > (thread.samples_per_s or 0)):
            best = torch_best
        if best is None:
            return None
        args: dict[str, Any] = {"num_workers": best.num_workers}
        if best.loader == "ThreadLoader":
            args["item_concurrency"] = best.item_concurrency
        batch = "batch_sampler=..., " if self.batching == "batch_sampler" else f"{self.batching}, "
        code = f"{best.loader}(dataset, {batch}" + ", ".join(f"{k}={v}" for k, v in args.items()) + ")"
        if best.loader == "DataLoader" and best.num_workers > 0:
            code = code[:-1] + ", persistent_workers=True)"
        return {"loader": best.loader, **args, "code": code}

    def to_json(self) -> dict[str, Any]:
        best_thread = self.best("ThreadLoader")
        return {
            "spec": self.spec,
            "source": self.source,
            "batch_size": self.batch_size,
            "batching": self.batching,
            "cpus": self.cpus,
            "bounds": {"batches": self.batches, "seconds": self.seconds},
            "runs": [asdict(r) for r in self.runs],
            "torch_skipped": self.torch_skipped,
            "best": {name: (asdict(b) if (b := self.best(name)) else None) for name in ("ThreadLoader", "DataLoader")},
            "ratio": self.ratio,
            "verdict": best_thread.verdict if best_thread else None,
            "verdict_text": best_thread.report.splitlines()[0] if best_thread and best_thread.report else None,
            "report": best_thread.report if best_thread else None,
            "settings": self.settings(),
            "hint": self.hint(),
            "grid": self.grid,
        }


# -- the target ----------------------------------------------------------------------------------
def load_target(spec: str, *, batch_size: int | None = None) -> Target:
    """Import ``MODULE:FACTORY`` (``FACTORY`` may be dotted: ``module:Class.make``), call it
    with no arguments and describe what it returned. ``batch_size`` overrides the loader's (or
    :data:`DEFAULT_BATCH_SIZE` for a dataset). Raises :class:`FactoryError` naming ``spec``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise FactoryError(f"expected MODULE:FACTORY (e.g. mypkg.data:make_dataset), got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: modules of the current directory
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise FactoryError(f"{spec}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise FactoryError(f"{spec}: {module_name} has no attribute {attr!r}") from exc
    if not callable(obj):
        raise FactoryError(f"{spec}: {attr} is a {type(obj).__name__}, not a function returning a dataset or loader")
    try:
        made = obj()
    except Exception as exc:
        raise FactoryError(f"{spec}: calling {attr}() raised {type(exc).__name__}: {exc}") from exc
    return describe(spec, made, batch_size=batch_size)


def describe(spec: str, made: Any, *, batch_size: int | None = None) -> Target:
    """The :class:`Target` for what the factory ``spec`` returned (a loader or a dataset)."""
    from torch_threadloader.loader import ThreadLoader

    if batch_size is not None and (isinstance(batch_size, bool) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if isinstance(made, DataLoader):
        return _from_loader(spec, made, batch_size, thread=isinstance(made, ThreadLoader))
    sized = hasattr(made, "__getitem__") and hasattr(made, "__len__") and not isinstance(made, (str, bytes))
    if isinstance(made, Dataset) or sized:
        kwargs: dict[str, Any] = {"batch_size": batch_size or DEFAULT_BATCH_SIZE}
        return Target(spec, made, "dataset", kwargs)
    raise FactoryError(
        f"{spec} returned a {type(made).__name__}, which is neither a dataset (a torch Dataset, or an object "
        "with __getitem__ and __len__) nor a loader (torch.utils.data.DataLoader or ThreadLoader)"
    )


def _from_loader(spec: str, loader: DataLoader[Any], batch_size: int | None, *, thread: bool) -> Target:
    kwargs: dict[str, Any] = {
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
    }
    if getattr(loader, "in_order", True) is False:
        kwargs["in_order"] = False
    custom_batches = loader.batch_size is None and loader.batch_sampler is not None  # a batch_sampler of its own
    if custom_batches:
        if batch_size is not None:
            raise FactoryError(f"{spec}: the loader has a batch_sampler of its own; --batch-size does not apply")
        kwargs["batch_sampler"] = loader.batch_sampler
    else:
        kwargs["batch_size"] = batch_size if batch_size is not None else loader.batch_size
        kwargs["drop_last"] = loader.drop_last
        if not isinstance(loader.dataset, IterableDataset):
            sampler = loader.sampler
            if type(sampler) is RandomSampler and sampler.generator is None and not sampler.replacement:
                kwargs["shuffle"] = True
            elif type(sampler) is not SequentialSampler:
                kwargs["sampler"] = sampler
    torch_kwargs: dict[str, Any] = {}
    if loader.multiprocessing_context is not None and not thread:
        torch_kwargs["multiprocessing_context"] = loader.multiprocessing_context
    return Target(
        spec,
        loader.dataset,
        "ThreadLoader" if thread else "DataLoader",
        kwargs,
        torch_kwargs,
        source_num_workers=loader.num_workers,
        source_item_concurrency=getattr(loader, "item_concurrency", None) if thread else None,
        loader=loader,
    )


# -- the grid ------------------------------------------------------------------------------------
def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_grid(target: Target | None = None, cpus: int | None = None) -> dict[str, list[int]]:
    """The grid: torch's ``num_workers`` 0, 2, 4 up to the CPUs; ThreadLoader's ``num_workers``
    1, 2, 4 (up to twice the CPUs: threads waiting on I/O may outnumber them) and
    ``item_concurrency`` 1 and 4; the loader's own settings added when the factory returned one."""
    cpus = cpus or _cpus()
    grid = {
        "torch_num_workers": [n for n in (0, 2, 4) if n <= cpus],
        "num_workers": [n for n in (1, 2, 4) if n <= max(2 * cpus, 2)],
        "item_concurrency": [1, 4],
    }
    if target is not None and isinstance(target.dataset, IterableDataset):
        grid["item_concurrency"] = [1]  # an iterable's items come from one iterator per worker
    if target is not None and target.source_num_workers is not None:
        key = "num_workers" if target.source == "ThreadLoader" else "torch_num_workers"
        grid[key] = sorted({*grid[key], target.source_num_workers})
        if target.source_item_concurrency is not None:
            grid["item_concurrency"] = sorted({*grid["item_concurrency"], target.source_item_concurrency})
    return grid


def parse_grid(items: Iterable[str], base: Mapping[str, list[int]]) -> dict[str, list[int]]:
    """``base`` with each ``KEY=V,V,...`` of ``items`` replacing its key (``torch_num_workers``,
    ``num_workers``, ``item_concurrency``). ``torch_num_workers=`` (empty) skips torch's
    DataLoader. Raises ``ValueError`` naming the item."""
    grid = {k: list(v) for k, v in base.items()}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _GRID_KEYS:
            raise ValueError(f"--grid {item!r}: expected KEY=V,V,... with KEY one of {', '.join(_GRID_KEYS)}")
        try:
            numbers = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"--grid {item!r}: values must be integers, comma-separated") from None
        lowest = 1 if key == "item_concurrency" else 0
        if any(n < lowest for n in numbers):
            raise ValueError(f"--grid {item!r}: {key} values must be >= {lowest}")
        if not numbers and key != "torch_num_workers":
            raise ValueError(f"--grid {item!r}: give at least one value")
        grid[key] = sorted(set(numbers))
    return grid


# -- running -------------------------------------------------------------------------------------
class Progress:
    """A plain-text progress line on ``stream``: rewritten in place on a terminal (at most
    ten times a second), one line per finished configuration otherwise; nothing when ``stream``
    is None."""

    def __init__(self, stream: TextIO | None, total: int) -> None:
        self.stream = stream
        self.total = total
        self.tty = bool(stream is not None and stream.isatty())
        self._shown = 0.0

    def update(self, index: int, run: Run, limit: int, elapsed: float) -> None:
        if self.stream is None or not self.tty:
            return
        now = time.monotonic()
        if now - self._shown < 0.1:
            return
        self._shown = now
        line = f"[{index}/{self.total}] {run.label}: {run.batches}/{limit} batches, {elapsed:.1f} s"
        self.stream.write("\r" + line[:120].ljust(120))
        self.stream.flush()

    def done(self, index: int, run: Run) -> None:
        if self.stream is None:
            return
        rate = f"{run.samples_per_s:,.0f} samples/s" if run.samples_per_s is not None else f"failed: {run.error}"
        line = f"[{index}/{self.total}] {run.label}: {rate} ({run.batches} batches, {run.seconds:.1f} s)"
        self.stream.write(("\r" + line.ljust(120) + "\n") if self.tty else line + "\n")
        self.stream.flush()


def _batch_len(batch: Any, default: int | None) -> int:
    """Samples in ``batch``: the first dimension of its (first) tensor, else the batch size."""
    probe = batch
    for _ in range(3):
        if isinstance(probe, torch.Tensor):
            return int(probe.shape[0]) if probe.dim() > 0 else default or 1
        if isinstance(probe, Mapping) and probe:
            probe = next(iter(probe.values()))
        elif isinstance(probe, (list, tuple)) and probe:
            probe = probe[0]
        else:
            break
    return default or 1


def _run_one(
    target: Target,
    run: Run,
    *,
    max_batches: int,
    max_seconds: float,
    on_batch: Callable[[float], None],
) -> None:
    """Iterate one configuration until ``max_batches`` or ``max_seconds``; fill ``run``.
    The loader (and its workers) is closed before returning, also on an error."""
    from torch_threadloader.loader import ThreadLoader
    from torch_threadloader.pipeline_stats import verdict

    kwargs = dict(target.kwargs)
    persistent = run.num_workers > 0  # epochs after the first reuse their workers, as in training
    if run.loader == "ThreadLoader":
        loader: DataLoader[Any] = ThreadLoader(
            target.dataset,
            num_workers=run.num_workers,
            item_concurrency=run.item_concurrency or 1,
            persistent_workers=persistent,
            stats=True,
            **kwargs,
        )
    else:
        loader = DataLoader(
            target.dataset,
            num_workers=run.num_workers,
            persistent_workers=persistent,
            **kwargs,
            **target.torch_kwargs,
        )
    prefetched = max(run.num_workers, 1) * (loader.prefetch_factor or 2) if run.num_workers else 1
    nominal = target.batch_size
    unbatched = target.batching == "batch_size=None"  # each item is one sample, whatever its shape
    arrivals: list[tuple[float, int]] = []  # (seconds since start, samples) per batch
    startups: list[float] = []
    start = time.perf_counter()
    try:
        while run.batches < max_batches and time.perf_counter() - start < max_seconds:
            epoch_start = time.perf_counter()
            before = run.batches
            it = iter(loader)
            try:
                for batch in it:
                    now = time.perf_counter()
                    if run.batches == before:
                        startups.append(now - epoch_start)
                    n = 1 if unbatched else _batch_len(batch, nominal)
                    run.batches += 1
                    run.samples += n
                    arrivals.append((now - start, n))
                    on_batch(now - start)
                    if run.batches >= max_batches or now - start >= max_seconds:
                        break
            finally:
                close = getattr(it, "close", None)
                if callable(close):
                    close()
                del it
            if run.batches == before:
                raise RuntimeError("the loader yielded no batch in an epoch: is the dataset empty?")
            run.epochs += 1
        run.seconds = time.perf_counter() - start
        run.startup_s = sum(startups) / len(startups) if startups else None
        run.samples_per_s = _steady_rate(arrivals, prefetched, run.seconds)
        if isinstance(loader, ThreadLoader):
            run.verdict = verdict(loader.stats())[0]
            run.report = "\n".join(line.rstrip() for line in loader.report().splitlines())
    except Exception as exc:
        run.seconds = time.perf_counter() - start
        run.samples_per_s = None
        run.error = _one_line(exc)
    finally:
        if isinstance(loader, ThreadLoader):
            loader.close()
        del loader  # torch's persistent worker processes shut down when their loader is dropped
        gc.collect()


def _one_line(exc: BaseException) -> str:
    """``"Type: message"`` on one line; for a multi-line message (torch's "Caught ... in
    DataLoader worker process 0" with the worker's traceback) its first and last lines."""
    lines = [line.strip() for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


def _steady_rate(arrivals: Sequence[tuple[float, int]], prefetched: int, seconds: float) -> float | None:
    """Samples per second once the batches prefetched at the start are consumed: from the
    arrival of batch ``prefetched`` (at most half the batches in) to the last; over the whole
    run when there are fewer than two batches."""
    if len(arrivals) < 2:
        total = sum(n for _, n in arrivals)
        return total / seconds if seconds > 0 and total else None
    skip = max(1, min(prefetched, len(arrivals) // 2))
    elapsed = arrivals[-1][0] - arrivals[skip - 1][0]
    samples = sum(n for _, n in arrivals[skip:])
    return samples / elapsed if elapsed > 0 else None


def bench(
    target: Target,
    *,
    grid: Mapping[str, Sequence[int]] | None = None,
    batches: int = DEFAULT_BATCHES,
    seconds: float = DEFAULT_SECONDS,
    progress: TextIO | None = None,
) -> BenchResult:
    """Run ``target`` under torch's DataLoader for each ``torch_num_workers`` of ``grid``, then
    under ThreadLoader for each (``num_workers``, ``item_concurrency``), each for at most
    ``batches`` batches or ``seconds`` seconds, one after the other; progress on ``progress``.
    A configuration that fails is recorded with its error and the others still run."""
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise ValueError(f"batches must be a positive int, got {batches!r}")
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    grid = dict(grid) if grid is not None else default_grid(target)
    skipped = target.torch_unsupported
    runs = [] if skipped else [Run("DataLoader", n, None) for n in grid.get("torch_num_workers", [])]
    runs += [Run("ThreadLoader", n, c) for n in grid.get("num_workers", []) for c in grid.get("item_concurrency", [1])]
    if not runs:
        raise ValueError(f"the grid {grid!r} has no configuration to run")
    if not grid.get("torch_num_workers") and skipped is None:
        skipped = "torch_num_workers is empty in the grid"
    shown = Progress(progress, len(runs))
    for index, run in enumerate(runs, 1):
        _run_one(
            target,
            run,
            max_batches=batches,
            max_seconds=seconds,
            on_batch=functools.partial(shown.update, index, run, batches),
        )
        shown.done(index, run)
    return BenchResult(
        target.spec,
        target.source,
        target.batch_size,
        target.batching,
        _cpus(),
        batches,
        seconds,
        runs,
        skipped,
        {key: list(values) for key, values in grid.items()},
    )


# -- output --------------------------------------------------------------------------------------
def format_result(result: BenchResult) -> str:
    """The rates, the ratio, the verdict of the best ThreadLoader and the settings to use."""
    batch = {"batch_sampler": "its own batch_sampler", "batch_size=None": "batch_size=None: no batching"}.get(
        result.batching, result.batching
    )
    lines = [
        f"{result.spec} ({result.source}, {batch}; {result.cpus} CPUs; each configuration: up to "
        f"{result.batches} batches or {result.seconds:g} s)",
        "",
        f"{'configuration':<52} {'samples/s':>11} {'first batch':>12} {'batches':>8}  verdict",
    ]
    for run in result.runs:
        if run.samples_per_s is None:
            lines.append(f"{run.label:<52} {'failed':>11}  {run.error}")
            continue
        startup = f"{run.startup_s * 1e3:.0f} ms" if run.startup_s is not None else "-"
        lines.append(
            f"{run.label:<52} {run.samples_per_s:>11,.0f} {startup:>12} {run.batches:>8}  {run.verdict or ''}".rstrip()
        )
    lines.append("")
    if result.torch_skipped:
        lines.append(f"torch DataLoader not run: {result.torch_skipped}")
    thread, torch_best = result.best("ThreadLoader"), result.best("DataLoader")
    if result.ratio is not None and thread is not None and torch_best is not None:
        lines.append(f"best ThreadLoader / best DataLoader: {result.ratio:.2f}x  ({thread.label} / {torch_best.label})")
    if thread is not None and thread.report:
        lines += [
            "",
            f"report() of {thread.label}:",
            *(f"  {line}" if line else "" for line in thread.report.splitlines()),
        ]
    settings = result.settings()
    lines.append("")
    if settings is None:
        lines.append("every configuration failed: see the errors above")
    else:
        lines.append(f"use: {settings['code']}")
        hint = result.hint()
        if hint:
            lines.append(f"  ({hint})")
        if settings["loader"] == "DataLoader":
            lines.append(
                "  (torch's worker processes were faster here: the verdict above says what limits the threads)"
            )
    return "\n".join(lines)


def dumps(result: BenchResult) -> str:
    """``result`` as one JSON object (see ``docs/tuning.md``)."""
    return json.dumps(result.to_json(), indent=2)
