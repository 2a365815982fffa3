"""Images: decode off the GIL, reproducible torchvision v2 augmentation, batches in reused buffers.

Needs the ``images`` extra (torchvision, Pillow). See ``docs/images.md``.
"""

from torch_threadloader.images.augment import (
    Augmented,
    EpochCounter,
    current_generator,
    sample_draws,
    sample_generator,
)
from torch_threadloader.images.buffers import BufferedCollate, BufferStats
from torch_threadloader.images.decode import (
    DEFAULT_MAX_PIXELS,
    DecompressionBombError,
    ImageDecodeError,
    ImageMode,
    UnknownImageFormatError,
    decode_image,
)
from torch_threadloader.images.folder import AsyncImageFolder, ImageFolder

__all__ = [
    "AsyncImageFolder",
    "Augmented",
    "BufferStats",
    "BufferedCollate",
    "DEFAULT_MAX_PIXELS",
    "DecompressionBombError",
    "EpochCounter",
    "ImageDecodeError",
    "ImageFolder",
    "ImageMode",
    "UnknownImageFormatError",
    "current_generator",
    "decode_image",
    "sample_draws",
    "sample_generator",
]
