"""``max_bytes_in_flight`` measured: items of mixed sizes (1 KiB to 8 MiB), 4 workers with
``prefetch_factor=4`` (up to 16 batches in flight unbounded); each configuration in a fresh
process, for its peak RSS growth over the epoch and its throughput, side by side, repeated.
Targets: RSS growth under the budget plus 10%, the tracked peak under the budget
plus one batch, throughput with a budget of four batches at least 90% of unbounded.

    python -m benchmarks byte_budget [--repeats 3] [--items 240] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.datasets import MixedSizes, as_list
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import fresh_process

SIZES = MixedSizes.SIZES
BATCH = 8


def one(items: int, budget: int | None) -> dict[str, Any]:
    from torch_threadloader import ThreadLoader

    list(ThreadLoader(MixedSizes(4), batch_size=2, num_workers=1, collate_fn=as_list))  # imports and threads warm
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    loader: ThreadLoader[Any] = ThreadLoader(
        MixedSizes(items),
        batch_size=BATCH,
        num_workers=4,
        prefetch_factor=4,
        collate_fn=as_list,
        max_bytes_in_flight=budget,
    )
    start = time.perf_counter()
    n = 0
    for batch in loader:
        n += sum(a.nbytes for a in batch)
        time.sleep(0.004)  # the training step
    seconds = time.perf_counter() - start
    stats = loader.stats()
    loader.close()
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return {"seconds": seconds, "rss_growth": growth, "peak": stats.get("budget", {}).get("peak"), "bytes": n}


def main(argv: Sequence[str] | None = None, *, suite: str = "byte_budget") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--items", type=int, default=240)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.items = 1, 24
    if args.one is not None:
        budget = None if args.one == "none" else int(args.one)
        print(json.dumps(one(args.items, budget)))
        return 0
    batch = sum(SIZES) * BATCH // len(SIZES)
    budgets = {"unbounded": None, "4 batches": 4 * batch, "2 batches": 2 * batch}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in budgets}
    for _ in range(args.repeats):
        for name, budget in budgets.items():  # interleaved
            child = ["--items", str(args.items), "--one", str(budget or "none")]
            runs[name].append(fresh_process("benchmarks.byte_budget", child))
    recorder = Recorder(suite, argv)
    case = f"{args.items} items of 1 KiB to 8 MiB, batch {BATCH}, 4 workers, prefetch_factor=4"
    for name, budget in budgets.items():
        config = f"{name} (budget {budget / 2**20:.1f} MiB)" if budget else name
        params = {"items": args.items, "budget_bytes": budget}
        recorder.add(case, config, "RSS growth", [r["rss_growth"] / 2**20 for r in runs[name]], "MiB", **params)
        peaks = [r["peak"] / 2**20 for r in runs[name] if r["peak"] is not None]
        if peaks:
            recorder.add(case, config, "tracked peak", peaks, "MiB", **params)
        speed = [runs["unbounded"][i]["seconds"] / r["seconds"] for i, r in enumerate(runs[name])]
        recorder.add(case, config, "throughput vs unbounded", speed, "x", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
