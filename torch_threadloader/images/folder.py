"""An ``ImageFolder`` on :func:`decode_image`: torchvision's classes, indices and sample order,
for a local directory or any fsspec URL."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from typing import Any

import fsspec
import torch
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, has_file_allowed_extension, make_dataset

from torch_threadloader.images.augment import EpochCounter, sample_draws, sample_generator
from torch_threadloader.images.decode import DEFAULT_MAX_PIXELS, ImageMode, decode_image

__all__ = ["ImageFolder"]


class ImageFolder(Dataset[tuple[Any, Any]]):
    """``root/<class>/**/<file>`` as ``(image, class_index)`` items, like
    ``torchvision.datasets.ImageFolder``: the same ``classes``, ``class_to_idx``, ``samples``
    (path, class index) in the same order, ``targets``, and the same ``extensions`` /
    ``is_valid_file`` / ``allow_empty`` rules and errors. The image is a ``uint8`` CHW tensor
    from :func:`decode_image` (``mode``, ``exif_orientation``, ``min_side``, ``max_pixels``
    passed on), not a PIL image; ``transform`` and ``target_transform`` get it as it is.

    ``root``: a local path (listed by torchvision's own ``find_classes``/``make_dataset``), or
    an fsspec URL (``s3://bucket/train``, ``file:///data``, ``memory://...``; listed with
    ``fs.ls``/``fs.walk`` in torchvision's order, read with ``fs.cat_file``), with
    ``storage_options`` for the filesystem. Samples are paths for local roots and full URLs for
    fsspec roots.

    ``seed``: when given, ``transform``'s random draws come from
    ``sample_generator(seed, epoch, index)`` (see :mod:`torch_threadloader.images.augment`);
    call :meth:`set_epoch` before each epoch. Without it, transforms draw from torch's global
    generator, as torchvision's dataset does.

    A file that cannot be decoded raises :class:`~torch_threadloader.images.ImageDecodeError`
    (or a subclass) naming its path, which fails that item's batch only.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        *,
        extensions: tuple[str, ...] | None = IMG_EXTENSIONS,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
        mode: ImageMode = "RGB",
        exif_orientation: bool = True,
        min_side: int | None = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        seed: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if is_valid_file is not None:
            extensions = None  # torchvision's rule: the two are exclusive, the function wins
        self.root = os.fspath(root)
        self.transform = transform
        self.target_transform = target_transform
        self.mode: ImageMode = mode
        self.exif_orientation = exif_orientation
        self.min_side = min_side
        self.max_pixels = max_pixels
        if seed is not None:
            sample_generator(seed, 0, 0)  # validates seed
        self.seed = seed
        self.epoch = EpochCounter()
        if "://" in self.root:
            self.fs, path = fsspec.core.url_to_fs(self.root, **dict(storage_options or {}))
            self.classes, self.class_to_idx = _fs_find_classes(self.fs, path, self.root)
            self.samples = _fs_make_dataset(
                self.fs, path, self.class_to_idx, extensions, is_valid_file, allow_empty, self.root
            )
        else:
            if storage_options:
                raise ValueError(f"storage_options apply to fsspec URLs only; root {self.root!r} is a local path")
            self.fs = None
            self.classes, self.class_to_idx = find_classes(self.root)
            self.samples = make_dataset(self.root, self.class_to_idx, extensions, is_valid_file, allow_empty)
        self.extensions = extensions
        self.imgs = self.samples
        self.targets = [target for _, target in self.samples]

    def set_epoch(self, epoch: int) -> None:
        """With ``seed``: draw for ``epoch`` (an int >= 0) from now on, in every worker's copy."""
        self.epoch.set(epoch)

    def __len__(self) -> int:
        return len(self.samples)

    def read(self, index: int) -> bytes | bytearray:
        """The encoded bytes of sample ``index``."""
        path = self.samples[index][0]
        if self.fs is not None:
            data: bytes = self.fs.cat_file(path)
            return data
        with open(path, "rb") as f:
            buffer = bytearray(os.fstat(f.fileno()).st_size)
            read = f.readinto(buffer)
        return buffer if read == len(buffer) else buffer[:read]

    def load(self, index: int) -> torch.Tensor:
        """Sample ``index`` decoded: a ``uint8`` CHW tensor, before any transform."""
        return decode_image(
            self.read(index),
            item=self.samples[index][0],
            mode=self.mode,
            exif_orientation=self.exif_orientation,
            min_side=self.min_side,
            max_pixels=self.max_pixels,
        )

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image: Any = self.load(index)
        target: Any = self.samples[index][1]
        if self.transform is not None:
            if self.seed is None:
                image = self.transform(image)
            else:
                with sample_draws(sample_generator(self.seed, self.epoch.get(), index)):
                    image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def __repr__(self) -> str:
        return f"ImageFolder(root={self.root!r}, {len(self.classes)} classes, {len(self)} samples)"


def _fs_find_classes(fs: Any, path: str, root: str) -> tuple[list[str], dict[str, int]]:
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"root {root!r} does not exist") from exc
    classes = sorted(posixpath.basename(e["name"].rstrip("/")) for e in entries if e["type"] == "directory")
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {root}.")
    return classes, {name: i for i, name in enumerate(classes)}


def _fs_make_dataset(
    fs: Any,
    path: str,
    class_to_idx: dict[str, int],
    extensions: tuple[str, ...] | None,
    is_valid_file: Callable[[str], bool] | None,
    allow_empty: bool,
    root: str,
) -> list[tuple[str, int]]:
    """torchvision's ``make_dataset`` over ``fs.walk``: classes in index order, then
    ``sorted(walk)`` and sorted file names, the same validity rules and errors."""
    if extensions is None and is_valid_file is None:
        raise ValueError("Both extensions and is_valid_file cannot be None")
    if extensions is not None and is_valid_file is not None:
        raise ValueError("Both extensions and is_valid_file cannot be not None at the same time")
    is_valid: Callable[[str], bool]
    if is_valid_file is None:
        allowed = extensions

        def is_valid(name: str) -> bool:
            return bool(has_file_allowed_extension(name, allowed))

    else:
        is_valid = is_valid_file
    samples: list[tuple[str, int]] = []
    found: set[str] = set()
    base = path.rstrip("/")
    for target_class in sorted(class_to_idx, key=class_to_idx.__getitem__):
        class_index = class_to_idx[target_class]
        target_dir = f"{base}/{target_class}"
        if not fs.isdir(target_dir):
            continue
        for dirpath, _, fnames in sorted(fs.walk(target_dir)):
            for fname in sorted(fnames):
                file_path = f"{dirpath.rstrip('/')}/{fname}"
                if is_valid(file_path):
                    samples.append((fs.unstrip_protocol(file_path), class_index))
                    found.add(target_class)
    empty = set(class_to_idx) - found
    if empty and not allow_empty:
        msg = f"Found no valid file for the classes {', '.join(sorted(empty))}. "
        if extensions is not None:
            msg += f"Supported extensions are: {extensions if isinstance(extensions, str) else ', '.join(extensions)}"
        raise FileNotFoundError(msg)
    return samples
