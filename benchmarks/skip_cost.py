"""What ``on_error="skip"`` costs as epochs go by: 12 epochs of 4,000 samples of which 2,000
fail (each skipped and recorded), epoch 1 and epoch 12 side by side, as a ratio. A skip's cost
does not depend on the skips before it, so the ratio stays near 1 (it was 17x, each
skip scanning the records of every epoch).

    python -m benchmarks.skip_cost [--epochs 12] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader

SAMPLES, FAILING = 4_000, 2_000


class HalfCorrupt(Dataset[int]):
    """Sample ``i`` is ``i``; every odd one raises, as a corrupt file would."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> int:
        if i % 2:
            raise ValueError(f"sample {i} is corrupt")
        return i


def epoch_times(workers: int, epochs: int) -> list[float]:
    """Seconds per epoch of one loader, epoch after epoch."""
    times = []
    with ThreadLoader(HalfCorrupt(), batch_size=16, num_workers=workers, on_error="skip") as loader:
        for _ in range(epochs):
            start = time.perf_counter()
            for _batch in loader:
                pass
            times.append(time.perf_counter() - start)
        assert loader.stats()["skipped"] == FAILING * epochs
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"| num_workers | epoch 1 (ms) | epoch {args.epochs} (ms) | epoch {args.epochs} / epoch 1 |")
    print("|---|---|---|---|")
    for workers in (0, 4):
        runs = [epoch_times(workers, args.epochs) for _ in range(args.repeats)]
        first = [r[0] * 1e3 for r in runs]
        last = [r[-1] * 1e3 for r in runs]
        ratios = [r[-1] / r[0] for r in runs]

        def spread(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"

        print(f"| {workers} | {spread(first)} | {spread(last)} | {spread(ratios)} |")


if __name__ == "__main__":
    main()
