"""What a stalled ``next()`` waits for: ``stall_report_after``, ``LoaderStallWarning``, ``stalls()``.

python examples/stall_report.py

One sample of the epoch hangs on a lock for about two seconds (as a read from a stuck network
mount would): after ``stall_report_after=0.5`` seconds, and again after 1 s, the loader warns
with a report naming the batch, its samples, the stage each is in and the stack of the worker
thread that holds it. Nothing is stopped: the epoch ends with every batch. Then the same
without workers: the caller's thread loads the batch, and a thread of the epoch's reports it.
"""

from __future__ import annotations

import threading
import warnings

import torch
from torch.utils.data import Dataset

from torch_threadloader import LoaderStallWarning, ThreadLoader


class StuckMount(Dataset[torch.Tensor]):
    """Sample 21 waits for ``released`` (set by a timer about two seconds in)."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 21:
            self.released.wait(timeout=30)
        return torch.full((4,), i)


def stalled(num_workers: int) -> ThreadLoader[torch.Tensor]:
    """An epoch over ``StuckMount`` loaded by ``num_workers`` threads (0: the caller's)."""
    dataset = StuckMount()
    timer = threading.Timer(2.0, dataset.released.set)
    timer.start()
    loader = ThreadLoader(dataset, batch_size=8, num_workers=num_workers, stall_report_after=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LoaderStallWarning)  # printed below, once each
        batches = sum(1 for _ in loader)
    timer.join()
    assert batches == 8
    return loader


def main() -> None:
    loader = stalled(num_workers=2)
    for report in loader.stalls():
        print(report)
        print()
    print(f"8 batches, {len(loader.stalls())} stall reports; nothing was stopped")
    loader.close()
    alone = stalled(num_workers=0)
    print("without workers:", str(alone.stalls()[0]).splitlines()[0])
    alone.close()


if __name__ == "__main__":
    main()
