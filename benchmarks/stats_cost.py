"""What ``ThreadLoader(stats=True)`` costs per item: the same epochs with stats off and on,
interleaved, in one run; tiny items (``__getitem__`` returns its index) so that the
bookkeeping is all there is to see. Target: at most 1 µs per item.

    python -m benchmarks.stats_cost [--items 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader


class Tiny(Dataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def epoch_seconds(items: int, batch_size: int, workers: int, item_concurrency: int, stats: bool) -> float:
    loader: ThreadLoader[Any] = ThreadLoader(
        Tiny(items), batch_size=batch_size, num_workers=workers, item_concurrency=item_concurrency, stats=stats
    )
    with loader:
        start = time.perf_counter()
        for _ in loader:
            pass
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| configuration | off µs/item | on µs/item | cost µs/item (median, min–max) |")
    print("|---|---|---|---|")
    for batch_size, workers, ic in ((32, 0, 1), (32, 2, 1), (1, 0, 1), (32, 2, 4)):
        off, on, cost = [], [], []
        for _ in range(args.repeats):
            a = epoch_seconds(args.items, batch_size, workers, ic, False) / args.items * 1e6
            b = epoch_seconds(args.items, batch_size, workers, ic, True) / args.items * 1e6
            off.append(a)
            on.append(b)
            cost.append(b - a)
        print(
            f"| batch_size={batch_size}, num_workers={workers}, item_concurrency={ic} "
            f"| {statistics.median(off):.2f} | {statistics.median(on):.2f} "
            f"| {statistics.median(cost):.2f} ({min(cost):.2f}–{max(cost):.2f}) |"
        )


if __name__ == "__main__":
    main()
