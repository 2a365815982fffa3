"""Where the first batch of a later epoch waits, for ThreadLoader(num_workers=2).

    python -m benchmarks epoch_start [--epochs 200] [--profile] [--smoke]

Times ``iter(loader)`` and the first ``next()`` over many epochs of one loader with
persistent workers (its pool kept: the configuration of the harness's second-epoch target),
on the ``startup`` workload's dataset (256 in-memory items, batch 32), and splits the first
``next()`` with timestamps the dataset takes: from ``iter()`` returning to the first
``__getitem__`` (a pool thread wakes and pulls the batch's indices), the batch's items, and
from its last item to the batch in the caller's hands (collate, deposit, the caller wakes).
``--profile`` adds cProfile's view of ``iter()`` and the first ``next()``.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from collections.abc import Sequence

from benchmarks.datasets import StampedDataset
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import interleave
from torch_threadloader import ThreadLoader

BATCH = 32


def main(argv: Sequence[str] | None = None, *, suite: str = "epoch_start") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    epochs = 5 if args.smoke else args.epochs
    dataset = StampedDataset(256, BATCH)
    loader = ThreadLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True)
    profiler = cProfile.Profile() if args.profile else None

    def epoch() -> tuple[float, float, float, float, float]:
        if profiler is not None:
            profiler.enable()
        start = time.perf_counter()
        iterator = iter(loader)
        made = time.perf_counter()
        next(iterator)
        first = time.perf_counter()
        if profiler is not None:
            profiler.disable()
        for _ in iterator:
            pass
        first_item, last_item = dataset.stamps
        return made - start, first - made, first_item - made, last_item - first_item, first - last_item

    try:
        measured = interleave({"epoch": epoch}, epochs, collect=False)["epoch"]  # the warm-up starts the pool
    finally:
        loader.close()
    recorder = Recorder(suite, argv)
    case, config = "256 items, batch 32, later epochs", "ThreadLoader nw=2 persistent"
    for i, metric in enumerate(
        (
            "iter()",
            "first next()",
            "first next(): to the first __getitem__",
            "first next(): the batch's items",
            "first next(): last item to the batch in hand",
        )
    ):
        recorder.add(case, config, metric, [m[i] * 1e6 for m in measured], "µs", epochs=epochs)
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
