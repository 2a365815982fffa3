"""Exact mid-epoch resume: train a few steps, checkpoint, stop; a new process-like loader
resumes from the checkpoint and the batches match an uninterrupted epoch.

    python examples/resume.py [--steps 5] [--workers 4]
"""

from __future__ import annotations

import argparse
import io
import random
import time

import torch
from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader


class Samples(Dataset[int]):
    """Sample ``i`` is ``i``, after a short random wait (so workers finish out of order)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> int:
        time.sleep(random.random() * 0.002)
        return i


def make_loader(workers: int) -> ThreadLoader[torch.Tensor]:
    return ThreadLoader(
        Samples(), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0), num_workers=workers
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3, help="batches trained before the checkpoint")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    uninterrupted = [b.tolist() for b in make_loader(args.workers)]

    # Train a few steps, then save the loader's state with the rest of the checkpoint.
    loader = make_loader(args.workers)
    it = iter(loader)
    before = [next(it).tolist() for _ in range(args.steps)]
    checkpoint = io.BytesIO()
    torch.save({"loader": loader.state_dict()}, checkpoint)
    loader.close()  # the run stops here
    print(f"trained {len(before)} batches, checkpoint of {checkpoint.tell()} bytes")

    # A new run: same arguments (another num_workers is fine), state loaded, epoch finished.
    checkpoint.seek(0)
    resumed = make_loader(workers=max(args.workers // 2, 0))
    resumed.load_state_dict(torch.load(checkpoint, weights_only=True)["loader"])
    after = [b.tolist() for b in resumed]
    resumed.close()
    print(f"resumed: {len(after)} batches left")
    assert before + after == uninterrupted, "the resumed epoch differs from the uninterrupted one"
    print("the batches before and after the checkpoint are the uninterrupted epoch's: exact")


if __name__ == "__main__":
    main()
