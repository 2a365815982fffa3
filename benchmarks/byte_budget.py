"""``max_bytes_in_flight`` measured: items of mixed sizes (1 KiB to 8 MiB), 4 workers with
``prefetch_factor=4`` (up to 16 batches in flight unbounded); each configuration in a fresh
process, for its peak RSS growth over the epoch and its throughput, side by side, repeated.
Targets: RSS growth under the budget plus 10%, the tracked peak under the budget
plus one batch, throughput with a budget of four batches at least 90% of unbounded.

    python -m benchmarks.byte_budget [--repeats 3] [--items 240]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
from torch.utils.data import Dataset

SIZES = (1024, 64 * 1024, 8 << 20, 256 * 1024, 2 << 20, 4096, 1 << 20, 16 * 1024)
BATCH = 8


class Mixed(Dataset[np.ndarray]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        a = np.empty(SIZES[i % len(SIZES)], dtype=np.uint8)
        a.fill(i % 251)  # touch every page, as a decoded sample would
        return a


def collate(items: list[np.ndarray]) -> list[np.ndarray]:
    return items


def one(items: int, budget: int | None) -> dict[str, Any]:
    from torch_threadloader import ThreadLoader

    list(ThreadLoader(Mixed(4), batch_size=2, num_workers=1, collate_fn=collate))  # imports and threads warm
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    loader: ThreadLoader[Any] = ThreadLoader(
        Mixed(items),
        batch_size=BATCH,
        num_workers=4,
        prefetch_factor=4,
        collate_fn=collate,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--items", type=int, default=240)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        budget = None if args.one == "none" else int(args.one)
        print(json.dumps(one(args.items, budget)))
        return
    batch = sum(SIZES) * BATCH // len(SIZES)
    budgets = {"unbounded": None, "4 batches": 4 * batch, "2 batches": 2 * batch}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in budgets}
    for _ in range(args.repeats):
        for name, budget in budgets.items():  # interleaved
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.byte_budget",
                    "--items",
                    str(args.items),
                    "--one",
                    str(budget or "none"),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            runs[name].append(json.loads(out.stdout))
    base = statistics.median(r["seconds"] for r in runs["unbounded"])
    largest = max(sum(SIZES[(i + j) % len(SIZES)] for j in range(BATCH)) for i in range(0, len(SIZES)))
    print(f"mean batch {batch / 2**20:.1f} MiB, largest batch {largest / 2**20:.1f} MiB, {args.items} items, 4 workers")
    print("| budget | RSS growth MiB (median, min–max) | tracked peak MiB | throughput vs unbounded |")
    print("|---|---|---|---|")
    for name, budget in budgets.items():
        rss = [r["rss_growth"] / 2**20 for r in runs[name]]
        peak = [r["peak"] / 2**20 for r in runs[name] if r["peak"] is not None]
        speed = [base / r["seconds"] for r in runs[name]]
        limit = f" (budget {budget / 2**20:.1f})" if budget else ""
        print(
            f"| {name}{limit} | {statistics.median(rss):.1f} ({min(rss):.1f}–{max(rss):.1f}) | {max(peak):.1f} |"
            if peak
            else f"| {name} | {statistics.median(rss):.1f} ({min(rss):.1f}–{max(rss):.1f}) | - |",
            end="",
        )
        print(f" {statistics.median(speed):.2f} ({min(speed):.2f}–{max(speed):.2f}) |")


if __name__ == "__main__":
    main()
