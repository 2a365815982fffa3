"""Which stage limits a loader, and what to change: ``ThreadLoader(stats=True)`` and ``report()``.

Three small pipelines whose limit is known (waiting on I/O in ``__getitem__``, a slow
``collate_fn``, a slow training step); the report names each.

    python examples/report.py
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader


class Waits(Dataset[int]):
    """Each item waits 2 ms, as a read from a slow disk or a remote store would."""

    def __init__(self, wait: float) -> None:
        self.wait = wait

    def __len__(self) -> int:
        return 128

    def __getitem__(self, i: int) -> int:
        time.sleep(self.wait)
        return i


def slow_collate(batch: list[int]) -> torch.Tensor:
    time.sleep(0.01)
    return torch.tensor(batch)


def show(title: str, loader: ThreadLoader[torch.Tensor], step: float = 0.0) -> None:
    with loader:
        for _ in loader:
            time.sleep(step)  # the training step
        print(f"== {title}")
        print(loader.report())
        print()


def main() -> None:
    show("items wait on I/O", ThreadLoader(Waits(0.002), batch_size=8, num_workers=2, stats=True))
    show(
        "a slow collate_fn", ThreadLoader(Waits(0.0), batch_size=8, num_workers=2, collate_fn=slow_collate, stats=True)
    )
    show("a slow training step", ThreadLoader(Waits(0.0), batch_size=8, num_workers=2, stats=True), step=0.01)


if __name__ == "__main__":
    main()
