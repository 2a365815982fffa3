"""Ray Data's own per-sample path (``Dataset.map`` in Ray tasks, then ``iter_torch_batches``)
against Ray Data + ThreadLoader's last mile (``RayDataSource`` -> threads -> batches), on one
local Ray cluster, interleaved, a ratio per repeat.

    python -m benchmarks.ray_data_last_mile [--rows 4096] [--repeats 3] [--cpus 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch

FEATURES = 256


def transform(row: dict[str, Any]) -> dict[str, Any]:
    """A per-sample transform in Python and NumPy (~tens of microseconds)."""
    x = np.sin(np.arange(FEATURES, dtype=np.float32) + float(row["id"]))
    for _ in range(4):
        x = np.tanh(x * 1.01)
    return {"x": x, "y": int(row["id"]) % 10}


def ray_own(ds: Any, batch: int) -> int:
    rows = 0
    for b in ds.map(transform).iter_torch_batches(batch_size=batch):
        rows += len(b["y"])
    return rows


def last_mile(ds: Any, batch: int, threads: int) -> int:
    import datapipes as dp
    from torch_threadloader import ThreadLoader
    from torch_threadloader.integrations.ray_data import RayDataSource

    graph = dp.ThreadMapper(RayDataSource(ds, batch_size=batch), transform, num_threads=threads).batch(batch)
    rows = 0
    for b in ThreadLoader(graph.collate(), batch_size=None, num_workers=1):
        rows += len(b["y"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    import ray
    import ray.data

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    torch.set_num_threads(1)
    try:
        ds = ray.data.range(args.rows)
        ray_own(ds, args.batch)  # warm-up: workers started, functions shipped
        last_mile(ds, args.batch, args.cpus)
        ratios, own_rate, ours_rate = [], [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            n = ray_own(ds, args.batch)
            a = n / (time.perf_counter() - t)
            t = time.perf_counter()
            m = last_mile(ds, args.batch, args.cpus)
            b = m / (time.perf_counter() - t)
            assert n == m == args.rows, (n, m, args.rows)
            own_rate.append(a)
            ours_rate.append(b)
            ratios.append(b / a)
    finally:
        ray.shutdown()
    print(
        f"| ray_data_last_mile | {args.rows} rows, {args.cpus} CPUs, batch {args.batch} | "
        f"{statistics.median(own_rate):,.0f} rows/s | {statistics.median(ours_rate):,.0f} rows/s | "
        f"{statistics.median(ratios):.2f} ({min(ratios):.2f} – {max(ratios):.2f}, {args.repeats} runs) |"
    )


if __name__ == "__main__":
    main()
