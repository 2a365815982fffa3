"""Experiment: the CPU cost of per-sample random draws (``sample_draws``) on a v2 training pipeline.

    python -m benchmarks images_draws [--rounds 7] [--items 200] [--smoke]

Runs ``RandomResizedCrop(224)``, ``RandomHorizontalFlip``, ``ToDtype``, ``Normalize`` on a
decoded 3x375x500 ``uint8`` image in the calling thread with one intra-op thread: plain (draws
from torch's global generator, reseeded for item ``i`` with the seed of
``sample_generator(0, 0, i)``), and inside ``sample_draws(sample_generator(0, 0, i))``, so both
make the same draws and the same crops (checked) and differ only by the mode; each item runs
both, back to back, in alternating order. CPU time is this thread's (``time.thread_time``), so other
processes on the machine move it less than wall time. Records the CPU per item of each,
the difference, and how many torch calls one item makes through the mode.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import torch
from torch.overrides import TorchFunctionMode

from benchmarks.result import Recorder, suite_parser
from benchmarks.workloads.jpeg_pipeline import train_transform
from torch_threadloader.images import sample_draws, sample_generator


class _Count(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls += 1
        return func(*args, **(kwargs or {}))


def main(argv: Sequence[str] | None = None, *, suite: str = "images_draws") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--items", type=int, default=200)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.items = 1, 4
    torch.set_num_threads(1)
    transform = train_transform()
    image = torch.randint(0, 256, (3, 375, 500), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    results: dict[str, list[float]] = {"global generator": [], "sample_draws": [], "sample_generator alone": []}
    seeds = [sample_generator(0, 0, i).initial_seed() for i in range(args.items)]
    torch.default_generator.manual_seed(seeds[1])
    expected = transform(image)
    with sample_draws(sample_generator(0, 0, 1)):
        assert torch.equal(transform(image), expected), "the two variants must make the same draws"
    for _ in range(args.rounds):
        # Item by item, the two variants back to back (their order alternating), so that a
        # slow moment of the machine falls on both.
        plain_s = drawn_s = 0.0
        for i in range(args.items):
            for variant in (0, 1) if i % 2 else (1, 0):
                start = time.thread_time()
                if variant == 0:
                    torch.default_generator.manual_seed(seeds[i])
                    transform(image)
                    plain_s += time.thread_time() - start
                else:
                    with sample_draws(sample_generator(0, 0, i)):
                        transform(image)
                    drawn_s += time.thread_time() - start
        results["global generator"].append(plain_s / args.items)
        results["sample_draws"].append(drawn_s / args.items)
        start = time.thread_time()
        for i in range(args.items):
            sample_generator(0, 0, i)
        results["sample_generator alone"].append((time.thread_time() - start) / args.items)
    counter = _Count()
    with counter:
        transform(image)
    recorder = Recorder(suite, argv)
    case, params = "v2 RandomResizedCrop, flip, ToDtype, Normalize", {"items": args.items, "rounds": args.rounds}
    for label, values in results.items():
        recorder.add(case, label, "CPU per item (this thread)", [v * 1e6 for v in values], "µs", **params)
    extra = [(d - p) * 1e6 for d, p in zip(results["sample_draws"], results["global generator"], strict=True)]
    recorder.add(case, "sample_draws - global generator", "CPU per item added", extra, "µs", **params)
    recorder.add(case, "sample_draws", "torch calls through the mode per item", [counter.calls], "", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
