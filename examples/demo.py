"""The main demo: the same JPEG pipeline loaded by torch's DataLoader and by ThreadLoader.

It writes a folder of generated JPEG files, then runs epochs of decode + torchvision v2
augmentation through each loader in turn (DataLoader, ThreadLoader, ThreadLoader, DataLoader,
...), with a progress bar, and prints each loader's median throughput with its range, and the
median and range of the ratio of each round's pair. One epoch's ratio is noise on a small
machine; the median of several interleaved ones is not. Everything is local and generated: no
download.

    python examples/demo.py [--images 2048] [--workers 2] [--batch-size 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
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
    with tqdm(total=total, desc=name, unit="img", leave=False) as bar:
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
    parser.add_argument("--rounds", type=int, default=3, help="epochs per loader, interleaved (default 3)")
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
        torch_loader = DataLoader(dataset, **common)
        rates: dict[str, list[float]] = {"DataLoader": [], "ThreadLoader": []}
        with ThreadLoader(dataset, **common) as thread_loader:
            loaders = {"DataLoader": torch_loader, "ThreadLoader": thread_loader}
            for r in range(args.rounds):
                order = ("DataLoader", "ThreadLoader") if r % 2 == 0 else ("ThreadLoader", "DataLoader")
                for name in order:
                    rates[name].append(run_epoch(f"{name:12s} {r + 1}/{args.rounds}", loaders[name], args.images))
    ratios = [t / d for t, d in zip(rates["ThreadLoader"], rates["DataLoader"], strict=True)]
    print(f"torch.utils.data.DataLoader (worker processes): {_spread(rates['DataLoader'], '.1f')} images/s")
    print(f"torch_threadloader.ThreadLoader (threads):      {_spread(rates['ThreadLoader'], '.1f')} images/s")
    print(f"ratio ThreadLoader / DataLoader:                {_spread(ratios, '.2f')}x")
    print(f"({args.rounds} epochs each, interleaved: the median, and the range in brackets)")


def _spread(values: list[float], spec: str) -> str:
    return f"{statistics.median(values):{spec}} [{min(values):{spec}} .. {max(values):{spec}}]"


if __name__ == "__main__":
    main()
