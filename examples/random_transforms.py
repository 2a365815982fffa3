"""A dataset written for worker processes, unchanged on worker threads: torchvision's FakeData
(which reseeds torch's global generator for every item) and a torchvision v2 augmentation in
``__getitem__`` (which draws from it). Each ThreadLoader worker owns the global random state,
seeded as torch seeds worker ``i``, so the batches are torch's DataLoader's, bit for bit.

    python examples/random_transforms.py [--images 64] [--workers 2] [--epochs 2]
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader
from torchvision.datasets import FakeData
from torchvision.transforms import v2

from torch_threadloader import ThreadLoader


def dataset(images: int) -> FakeData:
    augment = v2.Compose(
        [
            v2.ToImage(),
            v2.RandomResizedCrop(24, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.4, 0.4, 0.4),
            v2.ToDtype(torch.float32, scale=True),
        ]
    )
    return FakeData(images, (3, 32, 32), 10, transform=augment)


def epochs(loader_class: type[DataLoader], args: argparse.Namespace) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    loader = loader_class(
        dataset(args.images),
        batch_size=16,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=True,
        generator=torch.Generator().manual_seed(0),
    )
    got = [list(loader) for _ in range(args.epochs)]
    if isinstance(loader, ThreadLoader):
        loader.close()
    return got


def wrong_labels(args: argparse.Namespace) -> int:
    """FakeData's labels through ThreadLoader, each checked against ``dataset[i]`` read directly."""
    data = FakeData(args.images, (3, 32, 32), 10, transform=v2.ToImage())
    own = [data[i][1] for i in range(args.images)]
    with ThreadLoader(data, batch_size=16, shuffle=True, num_workers=args.workers, return_indices=True) as loader:
        return sum(int(y) != own[int(i)] for indices, (_, ys) in loader for i, y in zip(indices, ys, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    want, got = epochs(DataLoader, args), epochs(ThreadLoader, args)
    pairs = [
        pair
        for want_epoch, got_epoch in zip(want, got, strict=True)
        for pair in zip(want_epoch, got_epoch, strict=True)
    ]
    same = sum(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in pairs)
    print(f"{args.epochs} epochs, {args.workers} worker threads beside {args.workers} worker processes")
    print(f"batches identical to DataLoader's (images and labels): {same} of {len(pairs)}")
    wrong = wrong_labels(args)
    print(f"FakeData labels not its own: {wrong} of {args.images}")
    if same != len(pairs) or wrong:
        raise SystemExit("the batches differ from DataLoader's")


if __name__ == "__main__":
    main()
