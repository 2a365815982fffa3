"""Running ``bench``'s configurations: each loader built, iterated for at most so many
batches or seconds, its steady rate and (ThreadLoader) its verdict taken, and closed."""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import torch
from torch.utils.data import DataLoader

from torch_threadloader.tools.tune.grid import default_grid, usable_cpus
from torch_threadloader.tools.tune.result import BenchResult, Run
from torch_threadloader.tools.tune.target import Target

__all__ = ["DEFAULT_BATCHES", "DEFAULT_SECONDS", "Progress", "bench"]

#: Per configuration: at most this many batches ...
DEFAULT_BATCHES = 100
#: ... or this many seconds, whichever comes first.
DEFAULT_SECONDS = 10.0


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


@dataclass
class _Clock:
    """One configuration's bounds and what it measured so far: each batch's arrival (seconds
    since the start, samples) and each epoch's time to its first batch."""

    max_batches: int
    max_seconds: float
    on_batch: Callable[[float], None]
    start: float = field(default_factory=time.perf_counter)
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    startups: list[float] = field(default_factory=list)

    def more(self, run: Run) -> bool:
        """Whether another epoch starts: neither bound reached."""
        return run.batches < self.max_batches and time.perf_counter() - self.start < self.max_seconds


def _make_loader(target: Target, run: Run) -> DataLoader[Any]:
    """The configuration's loader; epochs after the first reuse their workers, as in training."""
    from torch_threadloader.loader import ThreadLoader

    kwargs = dict(target.kwargs)
    persistent = run.num_workers > 0
    if run.loader == "ThreadLoader":
        return ThreadLoader(
            target.dataset,
            num_workers=run.num_workers,
            item_concurrency=run.item_concurrency or 1,
            persistent_workers=persistent,
            stats=True,
            **kwargs,
        )
    return DataLoader(
        target.dataset,
        num_workers=run.num_workers,
        persistent_workers=persistent,
        **kwargs,
        **target.torch_kwargs,
    )


def _run_epoch(loader: DataLoader[Any], target: Target, run: Run, clock: _Clock) -> None:
    """One epoch, until its end or a bound; its iterator closed. Raises ``RuntimeError`` for
    an epoch without a batch."""
    nominal = target.batch_size
    unbatched = target.batching == "batch_size=None"  # each item is one sample, whatever its shape
    epoch_start = time.perf_counter()
    before = run.batches
    it = iter(loader)
    try:
        for batch in it:
            now = time.perf_counter()
            if run.batches == before:
                clock.startups.append(now - epoch_start)
            n = 1 if unbatched else _batch_len(batch, nominal)
            run.batches += 1
            run.samples += n
            clock.arrivals.append((now - clock.start, n))
            clock.on_batch(now - clock.start)
            if run.batches >= clock.max_batches or now - clock.start >= clock.max_seconds:
                break
    finally:
        close = getattr(it, "close", None)
        if callable(close):
            close()
        del it
    if run.batches == before:
        raise RuntimeError("the loader yielded no batch in an epoch: is the dataset empty?")
    run.epochs += 1


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
    from torch_threadloader.stats import verdict

    loader = _make_loader(target, run)
    prefetched = max(run.num_workers, 1) * (loader.prefetch_factor or 2) if run.num_workers else 1
    clock = _Clock(max_batches, max_seconds, on_batch)
    try:
        while clock.more(run):
            _run_epoch(loader, target, run, clock)
        run.seconds = time.perf_counter() - clock.start
        run.startup_s = sum(clock.startups) / len(clock.startups) if clock.startups else None
        run.samples_per_s = _steady_rate(clock.arrivals, prefetched, run.seconds)
        if isinstance(loader, ThreadLoader):
            run.verdict = verdict(loader.stats())[0]
            run.report = "\n".join(line.rstrip() for line in loader.report().splitlines())
    except Exception as exc:
        run.seconds = time.perf_counter() - clock.start
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
        usable_cpus(),
        batches,
        seconds,
        runs,
        skipped,
        {key: list(values) for key, values in grid.items()},
    )
