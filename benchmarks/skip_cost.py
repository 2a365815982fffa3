"""What ``on_error="skip"`` costs as epochs go by: 12 epochs of 4,000 samples of which 2,000
fail (each skipped and recorded), epoch 1 and epoch 12 side by side, as a ratio. A skip's cost
does not depend on the skips before it, so the ratio stays near 1.

    python -m benchmarks skip_cost [--epochs 12] [--repeats 3] [--smoke]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from benchmarks.datasets import FailingDataset
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import interleave, time_epoch
from torch_threadloader import ThreadLoader


def epoch_times(workers: int, epochs: int, samples: int) -> list[float]:
    """Seconds per epoch of one loader, epoch after epoch."""
    with ThreadLoader(FailingDataset(samples), batch_size=16, num_workers=workers, on_error="skip") as loader:
        times = interleave({"epoch": lambda: time_epoch(loader).wall}, epochs, warmup=0, collect=False)["epoch"]
        assert loader.stats()["skipped"] == samples // 2 * epochs
    return times


def main(argv: Sequence[str] | None = None, *, suite: str = "skip_cost") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4_000, help="samples per epoch, half of them failing")
    args = parser.parse_args(argv)
    if args.smoke:
        args.epochs, args.repeats, args.samples = 3, 1, 200
    recorder = Recorder(suite, argv)
    for workers in (0, 4):
        runs = [epoch_times(workers, args.epochs, args.samples) for _ in range(args.repeats)]
        case = f"num_workers={workers}"
        params = {"samples": args.samples, "epochs": args.epochs}
        recorder.add(case, "epoch 1", "epoch time", [r[0] * 1e3 for r in runs], "ms", **params)
        recorder.add(case, f"epoch {args.epochs}", "epoch time", [r[-1] * 1e3 for r in runs], "ms", **params)
        recorder.add(case, f"epoch {args.epochs} / epoch 1", "ratio", [r[-1] / r[0] for r in runs], "x", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
