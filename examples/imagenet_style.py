"""ImageNet-style training input with torch_threadloader.images, in a Lightning DataModule.

python examples/imagenet_style.py [--classes 4] [--per-class 24] [--epochs 2] [--workers 2]

Writes small generated JPEGs in an ImageFolder layout (``root/<class>/<n>.jpg``) to a temporary
folder, then trains a tiny CNN on CPU for a few steps: ``ImageFolder`` decodes with
torchvision's decoder, a torchvision v2 pipeline augments with random draws from
(seed, epoch, index), and ``BufferedCollate`` writes every batch into reused buffers. At the end
it checks that a fresh loader over the same seed and epoch gives bit-identical batches with a
different ``num_workers``, and prints what the buffers did.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2

from torch_threadloader import ThreadLoader
from torch_threadloader.images import BufferedCollate, ImageFolder


def write_images(root: Path, classes: int, per_class: int) -> None:
    """``classes`` folders of ``per_class`` 96x128 JPEGs: a coloured disc per class, with noise."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:96, 0:128]
    for c in range(classes):
        colour = rng.integers(40, 256, 3)
        for i in range(per_class):
            image = rng.normal(100, 30, (96, 128, 3))
            cy, cx, r = rng.integers(30, 66), rng.integers(30, 98), rng.integers(15, 30)
            image[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = colour
            path = root / f"class_{c}" / f"{i:04d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(path, quality=90)


def train_transform() -> v2.Compose:
    return v2.Compose(
        [
            v2.RandomResizedCrop(64, scale=(0.5, 1.0), antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.2, 0.2, 0.2),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )


class ImageFolderData(pl.LightningDataModule):
    """The training set of ``root`` with seeded augmentation; batches in reused buffers."""

    def __init__(self, root: Path, batch_size: int, workers: int, seed: int = 0) -> None:
        super().__init__()
        self.root, self.batch_size, self.workers, self.seed = root, batch_size, workers, seed
        # The buffers in flight: prefetch_factor (2) per worker, one per worker thread just
        # handed over, the batch in the training step and the one before it, a short last batch.
        self.collate = BufferedCollate(capacity=3 * workers + 3)

    def setup(self, stage: str) -> None:
        self.train_set = ImageFolder(self.root, transform=train_transform(), seed=self.seed)

    def train_dataloader(self) -> ThreadLoader[Any]:
        return ThreadLoader(
            self.train_set,
            batch_size=self.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(self.seed),
            num_workers=self.workers,
            persistent_workers=self.workers > 0,
            collate_fn=self.collate,
        )


class SetEpoch(pl.Callback):
    """Tells the dataset the epoch before each training epoch starts (its draws depend on it)."""

    def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        trainer.datamodule.train_set.set_epoch(trainer.current_epoch)  # type: ignore[attr-defined]


class TinyCNN(pl.LightningModule):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(32, classes),
        )
        self.losses: list[float] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(self.net(images), labels)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def first_batches(root: Path, workers: int, epoch: int, count: int) -> list[torch.Tensor]:
    dataset = ImageFolder(root, transform=train_transform(), seed=0)
    dataset.set_epoch(epoch)
    loader = ThreadLoader(dataset, batch_size=8, num_workers=workers)
    batches = []
    for images, _ in loader:
        batches.append(images.clone())
        if len(batches) == count:
            break
    loader.close()
    return batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--per-class", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", ".*does not have many workers.*")  # Lightning's hint for processes

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "train"
        write_images(root, args.classes, args.per_class)
        data = ImageFolderData(root, args.batch_size, args.workers)
        model = TinyCNN(args.classes)
        trainer = pl.Trainer(
            max_epochs=args.epochs,
            accelerator="cpu",
            callbacks=[SetEpoch()],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        start = time.perf_counter()
        trainer.fit(model, datamodule=data)
        seconds = time.perf_counter() - start
        steps = len(model.losses)
        print(
            f"trained {steps} steps over {args.epochs} epochs of {args.classes * args.per_class} images "
            f"in {seconds:.1f}s; loss {model.losses[0]:.3f} -> {model.losses[-1]:.3f}"
        )
        stats = data.collate.stats()
        print(
            f"buffers: {stats.allocations} allocated, {stats.reuses} batches written into a reused one, "
            f"{stats.unretained} outside the pool"
        )
        same = all(
            torch.equal(a, b) for a, b in zip(first_batches(root, 0, 1, 3), first_batches(root, 3, 1, 3), strict=True)
        )
        print(f"epoch 1 with 0 and with 3 workers: bit-identical batches: {same}")


if __name__ == "__main__":
    main()
