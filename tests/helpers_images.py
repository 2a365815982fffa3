"""Small generated images for the image tests: encoded bytes and ImageFolder trees."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def pixels(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth, seeded HxWx3 uint8 picture (gradients and a block), so JPEG keeps it close."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = [127 + 100 * np.sin(xx * rng.uniform(0.02, 0.2) + yy * rng.uniform(0.02, 0.2)) for _ in range(3)]
    image = np.stack(channels, axis=-1)
    image[height // 4 : height // 2, width // 4 : width // 2] = rng.integers(0, 256, 3)
    return np.clip(image, 0, 255).astype(np.uint8)


def encode(array: np.ndarray, fmt: str, **options: object) -> bytes:
    """``array`` encoded by Pillow as ``fmt`` (JPEG, PNG, BMP, ...)."""
    out = io.BytesIO()
    Image.fromarray(array).save(out, fmt, **options)
    return out.getvalue()


def jpeg_with_orientation(array: np.ndarray, orientation: int) -> bytes:
    """A lossless-ish (quality 100) JPEG of ``array`` carrying EXIF orientation ``orientation``."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(array, "JPEG", quality=100, exif=exif.tobytes())


#: The layout of the ImageFolder tests: class dirs (one nested, one with an uppercase
#: extension and a non-image file, one empty apart from a file torchvision skips).
TREE = {
    "cat/a.png": (12, 16),
    "cat/b.jpg": (10, 14),
    "cat/sub/c.PNG": (9, 11),
    "cat/notes.txt": None,
    "dog/z.jpeg": (8, 8),
    "dog/y.png": (20, 6),
    "Ant/x.png": (7, 9),
    "bee/0.bmp": (6, 5),
}


def write_tree(root: Path, tree: dict[str, tuple[int, int] | None] = TREE) -> Path:
    """Write ``tree`` (relative path -> (height, width), or None for a text file) under ``root``."""
    for i, (relative, size) in enumerate(sorted(tree.items())):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if size is None:
            path.write_text("not an image")
            continue
        fmt = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".bmp": "BMP"}[path.suffix.lower()]
        path.write_bytes(encode(pixels(*size, seed=i), fmt))
    return root


def write_jpeg_folder(root: Path, classes: int, per_class: int, size: tuple[int, int] = (40, 48)) -> Path:
    """``classes`` class dirs of ``per_class`` JPEGs each (quality 90)."""
    for c in range(classes):
        for i in range(per_class):
            path = root / f"class{c}" / f"{i:03d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode(pixels(*size, seed=c * 1000 + i), "JPEG", quality=90))
    return root
