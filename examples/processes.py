"""Threads, processes or both: the same loader with its threads in this process, and with
``worker_processes=2`` (the same thread graph in each of two worker processes).

Pure-Python item work holds the GIL, so threads in one process take turns on it; worker
processes each have their own. The batches are the same either way, and so is a checkpoint;
``report()`` names what limits each (its stats gathered from the processes too).

    python examples/processes.py [--items 512] [--workers 1]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader


class Tokens(Dataset[torch.Tensor]):
    """Item ``i``: a made-up text of 400 words, split and hashed into ids in plain Python
    (it holds the GIL the whole time, like most tokenisers written in Python)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> torch.Tensor:
        words = [f"w{(i * 31 + k * 17) % 997}" for k in range(400)]
        ids = [sum(ord(ch) for ch in word) % 5000 for word in " ".join(words).split()]
        return torch.tensor(ids[:256])


def epoch(loader: ThreadLoader[torch.Tensor]) -> tuple[list[torch.Tensor], float]:
    start = time.perf_counter()
    batches = list(loader)
    return batches, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=512)
    parser.add_argument("--workers", type=int, default=1, help="threads in each worker process")
    args = parser.parse_args()
    dataset = Tokens(args.items)

    def make(processes: int) -> ThreadLoader[torch.Tensor]:
        """The same loader; its 2 * workers threads here, or workers threads in each of 2 processes."""
        return ThreadLoader(
            dataset,
            batch_size=32,
            shuffle=True,
            generator=torch.Generator().manual_seed(0),
            num_workers=args.workers if processes else 2 * args.workers,
            worker_processes=processes,
            stats=True,  # gathered from the worker processes too
        )

    with make(0) as threads, make(2) as processes:
        in_process, t_threads = epoch(threads)
        epoch(processes)  # the first epoch starts the processes; they are kept for the next
        processes.generator.manual_seed(0)  # type: ignore[union-attr]
        in_children, t_processes = epoch(processes)
        same = all(torch.equal(a, b) for a, b in zip(in_process, in_children, strict=True))
        print(f"threads in this process: {args.items / t_threads:7.0f} items/s")
        print(f"2 worker processes:      {args.items / t_processes:7.0f} items/s")
        print(f"same batches in both modes: {same}")
        print(f"threads, verdict:   {threads.report().splitlines()[0][:150]}")
        print(f"processes, verdict: {processes.report().splitlines()[0][:150]}")

        # A checkpoint taken in process mode resumes exactly (here in the same loader).
        processes.generator.manual_seed(0)  # type: ignore[union-attr]
        it = iter(processes)
        first = [next(it) for _ in range(3)]
        state = processes.state_dict()
        del it
        processes.load_state_dict(state)
        resumed = first + list(processes)
        exact = all(torch.equal(a, b) for a, b in zip(resumed, in_children, strict=True))
        print(f"resumed after 3 batches: {'exact' if exact and len(resumed) == len(in_children) else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
