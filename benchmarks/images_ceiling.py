"""Experiment: ThreadLoader beside two plain threads on the jpeg_pipeline training work.

    python -m benchmarks images_ceiling [--images 256] [--rounds 7] [--smoke]

The harness's "no loader, 2 threads" (``benchmarks.harness.PlainLoop``) and
``ThreadLoader(num_workers=2, persistent_workers=True)``, both with ``default_collate``, over
the training dataset of ``benchmarks.workloads.jpeg_pipeline`` (decode_image,
RandomResizedCrop(224), flip, normalise), seeded (``Augmented``) and unseeded; one epoch of each
per round in a shuffled order, the first round dropped. Records the process's CPU time per item
and the epoch time. See docs/images.md.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import PlainLoop, count_items
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import close, interleave, time_epoch
from benchmarks.workloads.jpeg_pipeline import train_dataset, write_jpegs
from torch_threadloader import ThreadLoader


def main(argv: Sequence[str] | None = None, *, suite: str = "images_ceiling") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if args.smoke:
        args.images, args.rounds = 16, 1
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_jpegs(Path(tmp), args.images)
        loaders: dict[str, Iterable[Any]] = {}
        for seeding, seeded in (("seeded", True), ("unseeded", False)):
            dataset = train_dataset(paths, seeded=seeded)
            loaders[f"two plain threads, {seeding}"] = PlainLoop(dataset, 32, None, 1, threads=2)
            loaders[f"ThreadLoader nw=2, {seeding}"] = ThreadLoader(
                dataset, batch_size=32, num_workers=2, persistent_workers=True
            )
        try:
            runs = {label: (lambda ld=ld: time_epoch(ld, count_items)) for label, ld in loaders.items()}
            timings = interleave(runs, args.rounds)
        finally:
            for loader in loaders.values():
                close(loader)
    recorder = Recorder(suite, argv)
    case = f"{args.images} JPEGs, decode + RandomResizedCrop(224)"
    for label, ts in timings.items():
        recorder.add(case, label, "CPU per item", [t.cpu / t.count * 1e3 for t in ts], "ms", images=args.images)
        recorder.add(case, label, "epoch", [t.wall for t in ts], "s", images=args.images)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
