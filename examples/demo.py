"""The main demo: the same JPEG pipeline loaded by torch's DataLoader and by ThreadLoader.

It writes a folder of generated JPEG files, then runs one epoch of decode + torchvision v2
augmentation through each loader, with a progress bar, and prints both throughputs and
their ratio. Everything is local and generated: no download.

    python examples/demo.py [--images 2048] [--workers 2] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2
from tqdm import tqdm

from torch_threadloader import ThreadLoader


class JpegFolder(Dataset):
    """Reads and decodes one JPEG file per item, then applies a torchvision v2 transform.

    File reads, JPEG decoding and tensor transforms all release the GIL, which is what lets
    threads run them in parallel."""

    def __init__(self, paths: list[Path], transform: v2.Transform) -> None:
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        data = torch.frombuffer(bytearray(self.paths[i].read_bytes()), dtype=torch.uint8)
        image = decode_image(data, mode=ImageReadMode.RGB)
        return self.transform(image), i % 10


def make_jpegs(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` 500x375 JPEG files of smooth random colour fields."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in tqdm(range(count), desc="writing JPEGs", unit="file", leave=False):
        small = rng.integers(0, 255, size=(12, 16, 3), dtype=np.uint8)
        image = Image.fromarray(small).resize((500, 375), Image.Resampling.BILINEAR)
        path = folder / f"{i:05d}.jpg"
        image.save(path, quality=90)
        paths.append(path)
    return paths


def run_epoch(name: str, loader: DataLoader, total: int) -> float:
    """Images per second for one whole epoch, ``iter()`` (worker start-up) included."""
    start = time.perf_counter()
    seen = 0
    with tqdm(total=total, desc=name, unit="img") as bar:
        for images, _labels in loader:
            seen += len(images)
            bar.update(len(images))
    assert seen == total, f"{name} yielded {seen} images, expected {total}"
    return seen / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2048, help="how many JPEG files to generate (default 2048)")
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 2), help="workers for both loaders")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    transform = v2.Compose(
        [
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )
    with tempfile.TemporaryDirectory(prefix="threadloader-demo-") as tmp:
        dataset = JpegFolder(make_jpegs(Path(tmp), args.images), transform)
        common = dict(batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
        print(
            f"{args.images} JPEGs (500x375), batch {args.batch_size}, {args.workers} workers, "
            f"{os.cpu_count()} CPUs, torch {torch.__version__}"
        )
        torch_rate = run_epoch("DataLoader  ", DataLoader(dataset, **common), args.images)
        with ThreadLoader(dataset, **common) as loader:
            thread_rate = run_epoch("ThreadLoader", loader, args.images)
    print(f"torch.utils.data.DataLoader (worker processes): {torch_rate:8.1f} images/s")
    print(f"torch_threadloader.ThreadLoader (threads):      {thread_rate:8.1f} images/s")
    print(f"ratio ThreadLoader / DataLoader:                {thread_rate / torch_rate:8.2f}x")


if __name__ == "__main__":
    main()
