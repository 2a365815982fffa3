"""What ``bench`` measured: each configuration's :class:`Run`, the :class:`BenchResult` with
the best of each loader, and its text and JSON forms."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["BenchResult", "Run", "dumps", "format_result"]


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
