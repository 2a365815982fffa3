"""Image bytes to a ``uint8`` CHW tensor: torchvision's decoders first, Pillow for the rest.

JPEG and WebP go to ``torchvision.io.decode_image``, whose C++ decoders run without the GIL.
PNG goes to Pillow: torchvision 0.29.1's ``decode_png`` kills the process (a segmentation
fault after libpng's "IDAT: invalid code" message) on a PNG whose pixel data is corrupt, where
this module must raise an error naming the file. Every other format Pillow reads (BMP, TIFF,
GIF's first frame, ...) and the reduced-size
JPEG decode (``min_side``: Pillow's ``draft``, which libjpeg scales by 1/2, 1/4 or 1/8 while it
decodes; torchvision has no such option) go to Pillow, whose decoders release the GIL while
they run. Before either decodes, Pillow reads the header (about 25 us), which gives the format
and the size, so the pixel cap is checked before a byte of pixels is allocated.
"""

from __future__ import annotations

import io
import warnings
from typing import Any, Literal

import torch
import torchvision.io
from PIL import Image, ImageOps, UnidentifiedImageError
from torchvision.transforms.v2.functional import pil_to_tensor

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DecompressionBombError",
    "ImageDecodeError",
    "ImageMode",
    "UnknownImageFormatError",
    "decode_image",
]

# torchvision 0.29 warns on every decode that its decoders will move to TorchCodec. The
# decoders are what this module is for, so that one notice (and nothing else) is ignored.
warnings.filterwarnings(
    "ignore",
    message="The image decoding and encoding capabilities of TorchVision",
    category=DeprecationWarning,
)

ImageMode = Literal["RGB", "L", "RGBA", "LA", "unchanged"]

#: Pillow's own cap (``PIL.Image.MAX_IMAGE_PIXELS`` as shipped: 89,478,485 pixels, a 24-bit
#: image of 256 MiB), fixed at import so that a change to Pillow's global later does not move it.
DEFAULT_MAX_PIXELS: int = int(Image.MAX_IMAGE_PIXELS or 89_478_485)

#: Formats torchvision decodes without the GIL. Not PNG (see above), nor GIF (torchvision
#: returns every frame of an animated GIF; ImageFolder-style loading takes the first).
_TORCHVISION_FORMATS = frozenset({"JPEG", "WEBP"})
_TORCHVISION_MODES = {
    "RGB": torchvision.io.ImageReadMode.RGB,
    "L": torchvision.io.ImageReadMode.GRAY,
    "RGBA": torchvision.io.ImageReadMode.RGB_ALPHA,
    "LA": torchvision.io.ImageReadMode.GRAY_ALPHA,
    "unchanged": torchvision.io.ImageReadMode.UNCHANGED,
}


class ImageDecodeError(ValueError):
    """An image that cannot be decoded (corrupt or truncated); the message names the item."""


class UnknownImageFormatError(ImageDecodeError):
    """Bytes that neither torchvision nor Pillow recognise as an image."""


class DecompressionBombError(ImageDecodeError):
    """An image with more pixels than the cap (``max_pixels``), refused before decoding."""


def decode_image(
    data: bytes | bytearray | memoryview | torch.Tensor,
    *,
    item: object = None,
    mode: ImageMode = "RGB",
    exif_orientation: bool = True,
    min_side: int | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> torch.Tensor:
    """Decode one encoded image into a contiguous ``uint8`` tensor of shape ``[C, H, W]``.

    ``data``: the encoded bytes (or a 1-D ``uint8`` tensor of them). ``item`` names the image in
    errors (a path, a URL, an index). ``mode``: ``"RGB"`` (3 channels), ``"L"`` (gray, 1),
    ``"RGBA"``, ``"LA"``, or ``"unchanged"`` (the file's own channels). ``exif_orientation``:
    rotate/flip as the EXIF orientation tag says (as a camera viewer shows the photo).
    ``min_side``: for a JPEG, decode at the smallest of 1, 1/2, 1/4, 1/8 of its size whose
    shorter side is still at least ``min_side`` (Pillow's ``draft``); other formats ignore it.
    ``max_pixels``: images with more pixels than this raise before decoding. Pillow refuses
    on its own above twice ``PIL.Image.MAX_IMAGE_PIXELS`` (and warns above it), so a cap above
    that needs Pillow's raised too.

    Raises :class:`UnknownImageFormatError`, :class:`DecompressionBombError`, or
    :class:`ImageDecodeError` (corrupt, truncated), each naming ``item``, with the
    decoder's own exception as ``__cause__``.
    """
    if mode not in _TORCHVISION_MODES:
        raise ValueError(f"mode must be one of {sorted(_TORCHVISION_MODES)}, got {mode!r}")
    if min_side is not None and (isinstance(min_side, bool) or not isinstance(min_side, int) or min_side < 1):
        raise ValueError(f"min_side must be a positive int or None, got {min_side!r}")
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
        raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}")
    raw = _as_bytes_like(data)
    tensor = data if isinstance(data, torch.Tensor) else None
    name = "<bytes>" if item is None else repr(item) if not isinstance(item, str) else item
    try:
        image = Image.open(io.BytesIO(raw))  # reads the header only
    except UnidentifiedImageError as exc:
        raise UnknownImageFormatError(f"image {name}: not a format torchvision or Pillow can read") from exc
    except Image.DecompressionBombError as exc:
        raise DecompressionBombError(f"image {name}: {exc}") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageDecodeError(f"image {name}: corrupt header ({exc})") from exc
    with image:
        width, height = image.size
        if width * height > max_pixels:
            raise DecompressionBombError(
                f"image {name}: {width}x{height} = {width * height} pixels is more than "
                f"max_pixels={max_pixels} (a decompression bomb?)"
            )
        fmt = image.format
        if fmt in _TORCHVISION_FORMATS and (min_side is None or fmt != "JPEG"):
            return _decode_torchvision(raw if tensor is None else tensor, name, fmt, mode, exif_orientation)
        return _decode_pillow(image, name, mode, exif_orientation, min_side)


def _as_bytes_like(data: bytes | bytearray | memoryview | torch.Tensor) -> bytes | bytearray | memoryview:
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 1:
            raise ValueError(f"data: a tensor of encoded bytes must be 1-D uint8, got {data.dtype} {tuple(data.shape)}")
        array: Any = data.contiguous().numpy()
        return memoryview(array)
    if isinstance(data, bytes | bytearray | memoryview):
        return data
    raise TypeError(f"data must be bytes, bytearray, memoryview or a uint8 tensor, got {type(data).__name__}")


def _decode_torchvision(
    raw: bytes | bytearray | memoryview | torch.Tensor,
    name: str,
    fmt: str | None,
    mode: ImageMode,
    exif_orientation: bool,
) -> torch.Tensor:
    if isinstance(raw, torch.Tensor):
        encoded = raw.contiguous()
    else:
        # torch.frombuffer shares memory and warns on read-only buffers; the decoders only
        # read, but a writable copy (one memcpy of the encoded bytes) keeps torch's contract.
        encoded = torch.frombuffer(raw if isinstance(raw, bytearray) else bytearray(raw), dtype=torch.uint8)
    try:
        image = torchvision.io.decode_image(
            encoded, mode=_TORCHVISION_MODES[mode], apply_exif_orientation=exif_orientation
        )
    except RuntimeError as exc:
        reason = str(exc).rsplit(", ", 1)[-1].strip()  # drop torchvision's source location
        raise ImageDecodeError(f"image {name}: cannot decode {fmt} ({reason})") from exc
    decoded: torch.Tensor = image.contiguous()  # WebP comes as a CHW view of HWC memory
    return decoded


def _decode_pillow(
    image: Image.Image, name: str, mode: ImageMode, exif_orientation: bool, min_side: int | None
) -> torch.Tensor:
    try:
        if min_side is not None and image.format == "JPEG":
            width, height = image.size
            scale = next((s for s in (8, 4, 2) if min(width, height) // s >= min_side), 1)
            if scale > 1:
                image.draft(image.mode if mode == "unchanged" else mode, (width // scale, height // scale))
        image.load()
        if exif_orientation:
            image = ImageOps.exif_transpose(image)
        if mode != "unchanged" and image.mode != mode:
            image = image.convert(mode)
        tensor = pil_to_tensor(image)
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageDecodeError(f"image {name}: cannot decode {image.format} ({exc})") from exc
    if tensor.dtype != torch.uint8:
        raise ImageDecodeError(
            f"image {name}: {image.format} in mode {image.mode} is not 8-bit; pass mode='RGB', 'L', 'RGBA' or 'LA'"
        )
    contiguous: torch.Tensor = tensor.contiguous()  # pil_to_tensor gives a CHW view of HWC memory
    return contiguous
