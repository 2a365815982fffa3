"""Ray Data's own per-sample path (``Dataset.map`` in Ray tasks, then ``iter_torch_batches``)
against Ray Data + ThreadLoader's last mile (``RayDataSource`` -> threads -> batches), on one
local Ray cluster, interleaved, a ratio per repeat.

    python -m benchmarks ray_data_last_mile [--rows 4096] [--repeats 3] [--cpus 2] [--batch 64] [--smoke]
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import interleave, ratios, timed

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


def main(argv: Sequence[str] | None = None, *, suite: str = "ray_data_last_mile") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.repeats = 256, 1
    import ray
    import ray.data

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    torch.set_num_threads(1)
    try:
        ds = ray.data.range(args.rows)
        runs = {
            "Ray Data map + iter_torch_batches": functools.partial(timed, functools.partial(ray_own, ds, args.batch)),
            "RayDataSource + ThreadLoader": functools.partial(
                timed, functools.partial(last_mile, ds, args.batch, args.cpus)
            ),
        }
        timings = interleave(runs, args.repeats, order="fixed")  # warm-up: workers started, functions shipped
    finally:
        ray.shutdown()
    assert all(t.count == args.rows for ts in timings.values() for t in ts), "a run lost rows"
    recorder = Recorder(suite, argv)
    case = f"{args.rows} rows, {args.cpus} CPUs, batch {args.batch}"
    rates = {name: [t.count / t.wall for t in ts] for name, ts in timings.items()}
    for name, values in rates.items():
        recorder.add(case, name, "rows/s", values, "rows/s", rows=args.rows, cpus=args.cpus, batch=args.batch)
    own, ours = rates.values()
    recorder.add(case, "RayDataSource + ThreadLoader / Ray Data", "ratio", ratios(ours, own), "x")
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
