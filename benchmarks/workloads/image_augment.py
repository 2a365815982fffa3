"""image_augment: random crop 224, horizontal flip and normalise of a decoded 3x256x256 image."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from benchmarks.harness import Case, Scale, Target, Workload
from benchmarks.workloads.local_files import PLAIN_NOTE, cpu_configs

__all__ = ["WORKLOAD", "AugmentDataset"]

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1) * 255
CROP = 224
POOL = 64


class AugmentDataset(Dataset[torch.Tensor]):
    """Item ``i``: image ``i % 64`` of a pool of decoded 3x256x256 uint8 arrays, randomly
    cropped to 224x224 and flipped (the draws seeded by ``i``, so every loader sees the same
    augmentation), then normalised to float32 with ImageNet's mean and std, in NumPy."""

    def __init__(self, size: int) -> None:
        self.size = size
        rng = np.random.default_rng(0)
        self.images = [rng.integers(0, 256, (3, 256, 256), dtype=np.uint8) for _ in range(POOL)]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        image = self.images[index % POOL]
        rng = np.random.default_rng(index)
        top, left = rng.integers(0, image.shape[1] - CROP + 1, 2)
        crop = image[:, top : top + CROP, left : left + CROP]
        if rng.random() < 0.5:
            crop = crop[:, :, ::-1]
        x = crop.astype(np.float32, order="C")
        x -= MEAN
        x /= STD
        return torch.from_numpy(x)


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    items = scale.pick(2_048, 512, 64)
    yield [
        Case(
            "crop+flip+normalise",
            configs=cpu_configs(),
            items=items,
            batch_size=32,
            datasets={"default": AugmentDataset(items)},
            notes=PLAIN_NOTE,
        )
    ]


WORKLOAD = Workload(
    name="image_augment",
    description="Random crop 224, flip, normalise (NumPy) of a decoded 3x256x256 uint8 array (batch 32).",
    cases=_cases,
    targets=[
        Target("image_augment", "crop+flip+normalise", "ThreadLoader nw=2", "speedup", 1.3),
        Target("image_augment, reused buffers", "crop+flip+normalise", "ThreadLoader nw=2 buffers", "speedup", 1.3),
    ],
)
