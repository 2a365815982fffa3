"""Images: decode off the GIL, reproducible torchvision v2 augmentation, batches in reused buffers.

Needs the ``images`` extra (torchvision, Pillow). See ``docs/images.md``.
"""

from torch_threadloader.images.decode import (
    DEFAULT_MAX_PIXELS,
    DecompressionBombError,
    ImageDecodeError,
    ImageMode,
    UnknownImageFormatError,
    decode_image,
)

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DecompressionBombError",
    "ImageDecodeError",
    "ImageMode",
    "UnknownImageFormatError",
    "decode_image",
]
