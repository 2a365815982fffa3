"""Stragglers: ``defer_stragglers=True`` beside ``in_order=True``, ``in_order=False`` and torch.

    python -m benchmarks stragglers [--samples 2048] [--repeats 3] [--ms 2] [--step-ms 2] [--smoke]

Per-sample cost is heavy-tailed: a lognormal latency (median ``--ms``, sigma 0.5) and 1% of
samples 20x slower, spent in ``time.sleep`` (the GIL released, as I/O; the draws are fixed
per index). Two families, each with the same in-flight budget (``--workers`` x
``--concurrency`` samples): threads (a sync dataset, ``num_workers`` x ``item_concurrency``)
and async (``async def __getitem__``), and threads with the same budget as workers
(``num_workers`` x ``item_concurrency`` of them, one item each). Each ThreadLoader mode runs against torch's
``DataLoader`` at its best of ``num_workers`` in (2, 4, 8) (processes, in order). The consumer
runs a ``--step-ms`` step (a sleep) after each batch. Per configuration: samples per second of
the epoch and the p99 of ``next()``'s wait; rounds are interleaved, and the ratios to
``in_order=False`` and to torch's best are taken per round.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch.utils.data import DataLoader

from benchmarks.datasets import AsyncSleepDataset, SleepDataset, lognormal_latencies
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import close, interleave, quantile, ratios
from torch_threadloader import ThreadLoader

TORCH_WORKERS = (2, 4, 8)
MODES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("in_order=True", {}),
    ("in_order=False", {"in_order": False}),
    ("defer_stragglers", {"defer_stragglers": True}),
)


def run_epoch(loader: Iterable[Any], step_s: float) -> tuple[float, float]:
    """(samples per second, p99 of next()'s wait in ms) over one epoch."""
    waits: list[float] = []
    samples = 0
    start = time.perf_counter()
    it = iter(loader)
    while True:
        t = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - t)
        samples += len(batch)
        time.sleep(step_s)
    wall = time.perf_counter() - start
    close(loader)
    return samples / wall, quantile(waits, 0.99) * 1e3


def configs(batch_size: int, workers: int, concurrency: int, delays: list[float]) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    for family, data in (("threads", SleepDataset(delays)), ("async", AsyncSleepDataset(delays))):
        for mode, kw in MODES:
            out[f"{family} {mode}"] = functools.partial(
                ThreadLoader, data, batch_size=batch_size, num_workers=workers, item_concurrency=concurrency, **kw
            )
    # The same budget as one batch per thread: num_workers x item_concurrency workers, one item each.
    out[f"threads nw={workers * concurrency} item_concurrency=1"] = functools.partial(
        ThreadLoader, SleepDataset(delays), batch_size=batch_size, num_workers=workers * concurrency
    )
    for n in TORCH_WORKERS:
        out[f"torch nw={n}"] = functools.partial(DataLoader, SleepDataset(delays), batch_size=batch_size, num_workers=n)
    return out


def main(argv: Sequence[str] | None = None, *, suite: str = "stragglers") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--ms", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.smoke:
        args.samples, args.repeats, args.ms, args.step_ms = 128, 1, 0.2, 0.2
    delays = lognormal_latencies(args.samples, args.ms)
    made = configs(args.batch_size, args.workers, args.concurrency, delays)

    def run(make: Callable[[], Any]) -> tuple[float, float]:
        return run_epoch(make(), args.step_ms / 1000)

    runs = {name: functools.partial(run, make) for name, make in made.items()}
    measured = interleave(runs, args.repeats, warmup=0, order="fixed")
    rates = {name: [m[0] for m in ms] for name, ms in measured.items()}
    torch_best = [max(rates[f"torch nw={n}"][r] for n in TORCH_WORKERS) for r in range(args.repeats)]
    recorder = Recorder(suite, argv)
    case = f"{args.samples} samples, median {args.ms:g} ms, step {args.step_ms:g} ms"
    params = {k: getattr(args, k) for k in ("samples", "batch_size", "workers", "concurrency", "ms", "step_ms")}
    for name, ms in measured.items():
        recorder.add(case, name, "samples/s", rates[name], "samples/s", **params)
        recorder.add(case, name, "next() wait p99", [m[1] for m in ms], "ms", **params)
        family = name.split()[0]
        if family in ("threads", "async"):
            recorder.add(case, name, "vs in_order=False", ratios(rates[name], rates[f"{family} in_order=False"]), "x")
            recorder.add(case, name, "vs torch's best", ratios(rates[name], torch_best), "x")
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
