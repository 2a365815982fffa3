"""An ``ImageFolder`` on :func:`decode_image`: torchvision's classes, indices and sample order,
for a local directory or any fsspec URL."""

from __future__ import annotations

import asyncio
import os
import posixpath
from collections.abc import Callable, Mapping
from typing import Any

import fsspec
import torch
from fsspec.core import split_protocol
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, has_file_allowed_extension, make_dataset

from torch_threadloader.images.augment import EpochCounter, sample_draws, sample_generator
from torch_threadloader.images.decode import DEFAULT_MAX_PIXELS, ImageMode, decode_image

__all__ = ["AsyncImageFolder", "ImageFolder"]


class ImageFolder(Dataset[tuple[Any, Any]]):
    _asynchronous = False

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
    call :meth:`set_epoch` before each epoch. Without it, the draws are the loader's: in a
    ``ThreadLoader(per_sample_rng=True)`` from ``(the loader generator's base seed, the
    loader's epoch, index)``; elsewhere from torch's global generator, as torchvision's
    dataset does.

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
        self.storage_options = dict(storage_options or {})
        self.fs: Any = None
        if "://" in self.root:
            protocol, path = split_protocol(self.root)
            cls = fsspec.get_filesystem_class(protocol)
            if cls.async_impl and not self._asynchronous:
                raise ValueError(
                    f"root {self.root!r} is on an asynchronous filesystem ({protocol}); use AsyncImageFolder, "
                    "which awaits its reads on the loader's event loop (a synchronous read would run on "
                    "fsspec's own IO thread, which nothing closes)"
                )
            if cls.async_impl:
                self.classes, self.class_to_idx, self.samples = asyncio.run(
                    _async_listing(cls, path, self.storage_options, self.root, extensions, is_valid_file, allow_empty)
                )
            else:
                self.fs = cls(**self.storage_options)
                path = cls._strip_protocol(self.root)
                self.classes, self.class_to_idx = _fs_find_classes(self.fs, path, self.root)
                walks = {name: _sync_walk(self.fs, path, name) for name in self.classes}
                self.samples = _samples(self.fs, self.class_to_idx, walks, extensions, is_valid_file, allow_empty)
        else:
            if storage_options:
                raise ValueError(f"storage_options apply to fsspec URLs only; root {self.root!r} is a local path")
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
        return self.decode(index, self.read(index))

    def decode(self, index: int, data: bytes | bytearray) -> torch.Tensor:
        """``data`` (the bytes of sample ``index``) decoded with this folder's options."""
        return decode_image(
            data,
            item=self.samples[index][0],
            mode=self.mode,
            exif_orientation=self.exif_orientation,
            min_side=self.min_side,
            max_pixels=self.max_pixels,
        )

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.finish(index, self.read(index))

    def finish(self, index: int, data: bytes | bytearray) -> tuple[Any, Any]:
        """Item ``index`` from its encoded bytes: decoded, transformed (with the sample's draws
        when ``seed`` is set), and its target."""
        image: Any = self.decode(index, data)
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
    return _classes(entries, root)


def _classes(entries: list[dict[str, Any]], root: str) -> tuple[list[str], dict[str, int]]:
    classes = sorted(posixpath.basename(e["name"].rstrip("/")) for e in entries if e["type"] == "directory")
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {root}.")
    return classes, {name: i for i, name in enumerate(classes)}


class AsyncImageFolder(ImageFolder):
    """:class:`ImageFolder` for a root on an asynchronous filesystem (``s3://``, ``gs://``,
    ``http(s)://``, ...), as an async dataset: ``await folder[i]`` reads with
    :class:`~torch_threadloader.remote.FsspecDataset` (its retries, timeouts and per-loop
    clients, on the loader's event loop), then decodes and transforms on that loop's
    default-executor threads, so the loop never decodes. ThreadLoader awaits :meth:`aclose`
    when it closes. The listing is made at construction on a loop of its own, closed after.
    Arguments, attributes, order and errors: :class:`ImageFolder`'s; ``fetch_options``
    (``retry``, ``timeout``, ``deadline``, ``max_bytes``) go to the ``FsspecDataset``.
    Needs the ``remote`` extra (aiohttp).
    """

    _asynchronous = True

    def __init__(
        self,
        root: str,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        *,
        fetch_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        from torch_threadloader.remote import FsspecDataset

        super().__init__(root, transform, target_transform, **options)
        self.files = FsspecDataset(
            [path for path, _ in self.samples], storage_options=self.storage_options, **dict(fetch_options or {})
        )

    async def __getitem__(self, index: int) -> tuple[Any, Any]:  # type: ignore[override]
        data = await self.files[index]
        return await asyncio.get_running_loop().run_in_executor(None, self.finish, index, data)

    def read(self, index: int) -> bytes | bytearray:
        raise TypeError("AsyncImageFolder reads on an event loop: use `await folder[i]`, or a ThreadLoader")

    async def aclose(self) -> None:
        """Close the file clients on the running loop; idempotent."""
        await self.files.aclose()


def _sync_walk(fs: Any, path: str, name: str) -> list[tuple[str, list[str]]] | None:
    target_dir = f"{path.rstrip('/')}/{name}"
    if not fs.isdir(target_dir):
        return None
    return sorted((dirpath, fnames) for dirpath, _, fnames in fs.walk(target_dir))


async def _async_listing(
    cls: Any,
    path: str,
    options: dict[str, Any],
    root: str,
    extensions: tuple[str, ...] | None,
    is_valid_file: Callable[[str], bool] | None,
    allow_empty: bool,
) -> tuple[list[str], dict[str, int], list[tuple[str, int]]]:
    """The listing on an asynchronous filesystem, on a loop of its own (``asyncio.run``), its
    client session closed before it returns."""
    fs = cls(asynchronous=True, skip_instance_cache=True, **options)
    path = cls._strip_protocol(root)
    try:
        try:
            entries = await fs._ls(path, detail=True)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"root {root!r} does not exist") from exc
        classes, class_to_idx = _classes(entries, root)
        walks: dict[str, list[tuple[str, list[str]]] | None] = {}
        for name in classes:
            target_dir = f"{path.rstrip('/')}/{name}"
            if not await fs._isdir(target_dir):
                walks[name] = None
                continue
            walks[name] = sorted([(dirpath, fnames) async for dirpath, _, fnames in fs._walk(target_dir)])
        return classes, class_to_idx, _samples(fs, class_to_idx, walks, extensions, is_valid_file, allow_empty)
    finally:
        set_session = getattr(fs, "set_session", None)
        if set_session is not None:
            session = await set_session()
            close = getattr(session, "close", None)
            if close is not None:
                await close()


def _samples(
    fs: Any,
    class_to_idx: dict[str, int],
    walks: Mapping[str, list[tuple[str, list[str]]] | None],
    extensions: tuple[str, ...] | None,
    is_valid_file: Callable[[str], bool] | None,
    allow_empty: bool,
) -> list[tuple[str, int]]:
    """torchvision's ``make_dataset`` over walks already made: classes in index order, then
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
    for target_class in sorted(class_to_idx, key=class_to_idx.__getitem__):
        class_index = class_to_idx[target_class]
        for dirpath, fnames in walks[target_class] or []:
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
