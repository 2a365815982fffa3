"""Experiment: page faults and time per batch of the collate step, fresh batches against reused ones.

    python -m benchmarks images_buffers [--rounds 7] [--batches 24] [--workers 2] [--smoke]

The dataset returns stored 3x224x224 float32 tensors (64 of them, made once), so the only
memory an epoch allocates is the batch (32 x 588 KiB = 18.4 MiB): what is left is the collate.
Each round runs one epoch of each configuration, in a shuffled order, in this process:
``ThreadLoader(num_workers=N, persistent_workers=True)`` with ``default_collate`` and with
``BufferedCollate``, and the same two in the caller's thread (``num_workers=0``). Minor page
faults come from ``getrusage(RUSAGE_SELF)`` around the epoch (all threads). Records them per
round (the first round, which allocates the buffers, is dropped), and the buffered/default
ratios of faults and time per batch.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import default_collate

from benchmarks.datasets import StoredImages
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import close, interleave, ratios, time_epoch
from torch_threadloader import ThreadLoader
from torch_threadloader.images import BufferedCollate

BATCH = 32


def main(argv: Sequence[str] | None = None, *, suite: str = "images_buffers") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.batches = 1, 3
    dataset = StoredImages(args.batches * BATCH, stored=8 if args.smoke else 64)
    capacity = args.workers * 2 + args.workers + 3
    collates: dict[str, Callable[[], Any]] = {
        "default_collate": lambda: default_collate,
        "BufferedCollate": lambda: BufferedCollate(capacity=capacity),
    }
    loaders = {
        f"nw={workers}, {name}": ThreadLoader(
            dataset, batch_size=BATCH, num_workers=workers, persistent_workers=workers > 0, collate_fn=collate()
        )
        for workers in (args.workers, 0)
        for name, collate in collates.items()
    }
    try:
        timings = interleave({label: functools.partial(time_epoch, ld) for label, ld in loaders.items()}, args.rounds)
    finally:
        for loader in loaders.values():
            close(loader)
    recorder = Recorder(suite, argv)
    case = f"{args.batches} batches of {BATCH} x 3x224x224 float32"
    params = {"batches": args.batches, "workers": args.workers, "rounds": args.rounds}
    for label, ts in timings.items():
        recorder.add(case, label, "time per batch", [t.wall / t.count * 1e3 for t in ts], "ms", **params)
        recorder.add(case, label, "page faults per batch", [t.minor_faults / t.count for t in ts], "", **params)
    for prefix in (f"nw={args.workers}", "nw=0"):
        default, buffered = timings[f"{prefix}, default_collate"], timings[f"{prefix}, BufferedCollate"]
        faults = ratios([max(t.minor_faults, 1) for t in buffered], [max(t.minor_faults, 1) for t in default])
        recorder.add(case, f"{prefix}, buffered / default", "page faults ratio", faults, "x", **params)
        speed = ratios([t.wall for t in default], [t.wall for t in buffered])
        recorder.add(case, f"{prefix}, buffered vs default", "speed", speed, "x", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
