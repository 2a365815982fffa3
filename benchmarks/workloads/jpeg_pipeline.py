"""jpeg_pipeline: decode ~500x375 JPEG files and run torchvision v2 transforms, as for ImageNet.

Two kinds of case: the original pair (Pillow or ``torchvision.io`` decode, ``Resize(256)``,
``CenterCrop(224)``) with a hand-written dataset, and the training pipeline built from
``torch_threadloader.images`` (``decode_image``, ``RandomResizedCrop(224)``, flip, normalise, random
draws per sample, ``BufferedCollate``), with the reduced-size decode beside the full one.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms import v2

from benchmarks.harness import Case, Config, Scale, Target, Workload, plain, threadloader, torch_configs
from torch_threadloader.images import Augmented, BufferedCollate, decode_image

__all__ = ["WORKLOAD", "DecodedJpegs", "EncodedJpegs", "JpegDataset", "memory_dataset", "train_dataset", "write_jpegs"]

#: The reduced-size decode's smallest shorter side: a 500x375 JPEG decodes at 1/2 (250x187),
#: which RandomResizedCrop(224) then crops and resizes as it would the full image.
MIN_SIDE = 160

WIDTH, HEIGHT = 500, 375


def write_jpegs(directory: Path, count: int) -> list[Path]:
    """``count`` photo-like JPEGs (smooth gradients, shapes and grain; quality 90, 4:2:0),
    about 500x375 like ImageNet's typical image, written with Pillow."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    paths = []
    for i in range(count):
        width = WIDTH - int(rng.integers(0, 40))
        height = HEIGHT - int(rng.integers(0, 40))
        channels = []
        for _ in range(3):
            fx, fy = rng.uniform(0.005, 0.05, 2).tolist()
            phase = float(rng.uniform(0, 6.28))
            channels.append(127 + 100 * np.sin(xx * fx + yy * fy + phase))
        image = np.stack(channels, axis=-1)
        for _ in range(6):  # a few flat-coloured blobs with edges
            cy, cx, r = rng.integers(0, HEIGHT), rng.integers(0, WIDTH), rng.integers(15, 80)
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
            image[mask] = rng.integers(0, 256, 3)
        image += rng.normal(0, 12, image.shape)
        pixels = np.clip(image, 0, 255).astype(np.uint8)[:height, :width]
        path = directory / f"{i:05d}.jpg"
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(path)
    return paths


class JpegDataset(Dataset[torch.Tensor]):
    """Reads and decodes JPEG ``i``, then torchvision v2 ``Resize(256)``, ``CenterCrop(224)``,
    ``ToDtype(float32, scale=True)`` and ``Normalize``.

    ``decoder="pil"``: Pillow, then ``pil_to_tensor`` (what torchvision's ``ImageFolder`` and
    most pipelines do); ``"torchvision"``: ``torchvision.io.decode_jpeg`` on the file's bytes
    (deprecated since torchvision 0.29 in favour of TorchCodec, which is not installed here;
    its warning is silenced so that it does not flood the output).
    """

    def __init__(self, paths: list[Path], decoder: Literal["pil", "torchvision"] = "pil") -> None:
        self.paths = paths
        self.decoder = decoder
        if decoder == "torchvision":
            warnings.filterwarnings(
                "ignore",
                message="The image decoding and encoding capabilities of TorchVision",
                category=DeprecationWarning,
            )
        self.transform = v2.Compose(
            [
                v2.Resize(256, antialias=True),
                v2.CenterCrop(224),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
            ]
        )

    def __len__(self) -> int:
        return len(self.paths)

    def decode(self, index: int) -> torch.Tensor:
        """The image as a uint8 CHW tensor."""
        if self.decoder == "torchvision":
            return torchvision.io.decode_jpeg(torchvision.io.read_file(str(self.paths[index])))
        with Image.open(self.paths[index]) as image:
            rgb = image.convert("RGB") if image.mode != "RGB" else image
            rgb.load()
            return v2.functional.pil_to_tensor(rgb)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.transform(self.decode(index))  # type: ignore[no-any-return]


class DecodedJpegs(Dataset[torch.Tensor]):
    """File ``i`` read and decoded with :func:`torch_threadloader.images.decode_image`
    (torchvision's JPEG decoder, or Pillow's reduced-size decode with ``min_side``)."""

    def __init__(self, paths: list[Path], min_side: int | None = None) -> None:
        self.paths = paths
        self.min_side = min_side

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        path = self.paths[index]
        with open(path, "rb") as f:
            data = f.read()
        return decode_image(data, item=str(path), min_side=self.min_side)


def train_transform() -> v2.Compose:
    """ImageNet's training augmentation, on a uint8 CHW tensor."""
    return v2.Compose(
        [
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )


def train_dataset(paths: list[Path], min_side: int | None = None, seeded: bool = True) -> Dataset[torch.Tensor]:
    """Decode + ``train_transform()``; ``seeded``: random draws from (seed 0, epoch, index)
    (:class:`~torch_threadloader.images.Augmented`), else from torch's global generator."""
    decoded = DecodedJpegs(paths, min_side)
    if seeded:
        return Augmented(decoded, train_transform(), seed=0)
    return _Transformed(decoded, train_transform())


class _Transformed(Dataset[torch.Tensor]):
    def __init__(self, dataset: DecodedJpegs, transform: v2.Compose) -> None:
        self.dataset, self.transform = dataset, transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.transform(self.dataset[index])  # type: ignore[no-any-return]


TRAIN_CASE = "decode_image + RandomResizedCrop"
MEMORY_CASE = "decode_image + RandomResizedCrop, memory"
_DISTINCT = 32


class EncodedJpegs(Dataset[torch.Tensor]):
    """Item ``i``: encoded JPEG ``i % len(blobs)``, held in memory, decoded with ``decode_image``."""

    def __init__(self, blobs: list[bytes], size: int) -> None:
        self.blobs, self.size = blobs, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return decode_image(self.blobs[index % len(self.blobs)], item=index)


def memory_dataset(items: int) -> Dataset[torch.Tensor]:
    """For the memory probe (a fresh process): 32 generated JPEGs held as bytes, ``items`` items
    of the training pipeline over them (the files are written to a temporary folder, read, and
    removed)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        blobs = [path.read_bytes() for path in write_jpegs(Path(tmp), _DISTINCT)]
    return Augmented(EncodedJpegs(blobs, items), train_transform(), seed=0)


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    count = scale.pick(512, 64, 16)
    paths = write_jpegs(workdir / "jpeg", count)
    mean_kib = sum(p.stat().st_size for p in paths) / len(paths) / 1024
    notes = (
        f"{count} JPEGs, {mean_kib:.0f} KiB on average. 'no loader, 1 thread' runs the same work and "
        "`default_collate` in a plain loop with `torch.set_num_threads(1)`: the single-thread rate; "
        "the machine's ceiling is that rate times its CPU count."
    )
    yield [
        Case(
            f"{label} decode",
            configs=[plain(), threadloader(num_workers=2), *torch_configs(2)],
            items=count,
            batch_size=32,
            datasets={"default": JpegDataset(paths, decoder)},  # type: ignore[arg-type]
            notes=notes,
        )
        for label, decoder in (("Pillow", "pil"), ("torchvision.io", "torchvision"))
    ] + [
        Case(
            TRAIN_CASE,
            configs=[
                plain(),
                plain(threads=2),
                threadloader(num_workers=2),
                threadloader("ThreadLoader nw=2 buffers", num_workers=2, collate_fn=BufferedCollate(capacity=10)),
                threadloader(
                    "ThreadLoader nw=2 buffers, unseeded",
                    dataset="unseeded",
                    num_workers=2,
                    collate_fn=BufferedCollate(capacity=10),
                ),
                threadloader(
                    "ThreadLoader nw=2 buffers, reduced-size decode",
                    dataset="reduced",
                    num_workers=2,
                    collate_fn=BufferedCollate(capacity=10),
                ),
                plain("no loader, 1 thread, reduced-size decode", dataset="reduced"),
                *torch_configs(2),
                Config(
                    "torch nw=2 persistent, unseeded",
                    "torch",
                    {"num_workers": 2, "persistent_workers": True},
                    "unseeded",
                ),
            ],
            items=count,
            batch_size=32,
            datasets={
                "default": train_dataset(paths),
                "unseeded": train_dataset(paths, seeded=False),
                "reduced": train_dataset(paths, min_side=MIN_SIDE),
            },
            notes=(
                f"{notes} `decode_image` (torchvision's decoder), v2 RandomResizedCrop(224), RandomHorizontalFlip, "
                "ToDtype, Normalize, random draws per sample (`Augmented`, seed 0) unless 'unseeded'; 'buffers': "
                f"`BufferedCollate(capacity=10)`; 'reduced-size decode': `min_side={MIN_SIDE}` (Pillow's draft at 1/2). "
                "'no loader, 2 threads' is two plain threads with `default_collate`: the ceiling of a thread loader."
            ),
        ),
        Case(
            MEMORY_CASE,
            configs=[
                threadloader(num_workers=2),
                Config("torch nw=2", "torch", {"num_workers": 2}),
            ],
            items=count,
            batch_size=32,
            mode="memory",
            memory_factory="benchmarks.workloads.jpeg_pipeline:memory_dataset",
            notes=f"{count} items over {_DISTINCT} JPEGs held in memory, the training pipeline (seeded draws, "
            "`default_collate`: the probe passes options as JSON); one epoch per configuration, each in a fresh "
            "process. The issue's bound: ThreadLoader's peak RSS (whole process tree) at most half torch's.",
        ),
    ]


WORKLOAD = Workload(
    name="jpeg_pipeline",
    description="~500x375 JPEG files: decode (Pillow, and torchvision.io), torchvision v2 Resize(256), "
    "CenterCrop(224), float, Normalize, stack; the training pipeline of torch_threadloader.images "
    "(decode_image, RandomResizedCrop(224), flip, Normalize, per-sample draws, reused buffers); and the "
    "single-thread rate of that work with no loader.",
    cases=_cases,
    targets=[
        Target(
            "jpeg_pipeline (training, images)",
            TRAIN_CASE,
            "ThreadLoader nw=2 buffers",
            "speedup",
            1.1,
            ("torch nw=0", "torch nw=2", "torch nw=2 persistent"),
        ),
        Target(
            "jpeg_pipeline (training, images, unseeded)",
            TRAIN_CASE,
            "ThreadLoader nw=2 buffers, unseeded",
            "speedup",
            1.1,
            ("torch nw=2 persistent, unseeded",),
        ),
        Target(
            "jpeg_pipeline (training, images), share of 2 plain threads",
            TRAIN_CASE,
            "ThreadLoader nw=2 buffers",
            "speedup",
            0.9,
            ("no loader, 2 threads",),
        ),
    ]
    + [
        target
        for case in ("Pillow decode", "torchvision.io decode")
        for target in (
            Target(f"jpeg_pipeline ({case})", case, "ThreadLoader nw=2", "speedup", 1.1),
            Target(
                f"jpeg_pipeline ({case}), share of the CPU ceiling",
                case,
                "ThreadLoader nw=2",
                "ceiling_fraction",
                0.9,
                ("no loader, 1 thread",),
            ),
        )
    ],
)
