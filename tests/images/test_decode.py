"""decode_image: torchvision's decoders for JPEG/PNG/WebP, Pillow for the rest; mode, EXIF
orientation, reduced-size JPEG decoding, the pixel cap, and errors that name the item."""

from __future__ import annotations

import contextlib
import io
import struct
import zlib

import numpy as np
import pytest
import torch
import torchvision.io
from PIL import Image

from tests.fixtures.images import encode, jpeg_with_orientation, pixels
from torch_threadloader.images import (
    DecompressionBombError,
    ImageDecodeError,
    UnknownImageFormatError,
    decode_image,
)


def chw(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).permute(2, 0, 1)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "WEBP"])
def test_lossless_formats_give_the_pixels_back(fmt):
    array = pixels(13, 17)
    options = {"lossless": True} if fmt == "WEBP" else {}
    out = decode_image(encode(array, fmt, **options))
    assert out.dtype == torch.uint8 and out.shape == (3, 13, 17) and out.is_contiguous()
    assert torch.equal(out, chw(array))


def test_jpeg_is_torchvisions_decode_and_close_to_pillows():
    data = encode(pixels(30, 40), "JPEG", quality=90)
    out = decode_image(data)
    assert torch.equal(out, torchvision.io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8)))
    with Image.open(io.BytesIO(data)) as image:
        pillow = chw(np.asarray(image.convert("RGB")))
    assert (out.int() - pillow.int()).abs().max() <= 2


def test_a_uint8_tensor_of_bytes_is_accepted():
    data = encode(pixels(5, 6), "PNG")
    assert torch.equal(decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8)), decode_image(data))


@pytest.mark.parametrize("fmt", ["PNG", "BMP"])
def test_modes(fmt):
    array = pixels(8, 9)
    data = encode(array, fmt)
    gray = decode_image(data, mode="L")
    assert gray.shape == (1, 8, 9)
    expected = torch.from_numpy(np.asarray(Image.fromarray(array).convert("L")))[None]
    assert (gray.int() - expected.int()).abs().max() <= 1
    assert decode_image(data, mode="RGBA").shape == (4, 8, 9)
    assert decode_image(data, mode="LA").shape == (2, 8, 9)
    assert decode_image(data, mode="unchanged").shape == (3, 8, 9)
    gray_file = encode(array[:, :, 0], fmt)
    assert decode_image(gray_file, mode="unchanged").shape == (1, 8, 9)
    assert torch.equal(decode_image(gray_file, mode="RGB"), chw(np.repeat(array[:, :, :1], 3, axis=2)))


@pytest.mark.parametrize("min_side", [None, 10])  # torchvision's path; Pillow's path, at full size
def test_exif_orientation(min_side):
    array = pixels(10, 30)
    data = jpeg_with_orientation(array, 6)  # 6: the viewer rotates 90 degrees clockwise
    stored = decode_image(data, exif_orientation=False, min_side=min_side)
    assert stored.shape == (3, 10, 30)
    assert (stored.int() - chw(array).int()).abs().float().mean() < 8  # JPEG: close, not equal
    shown = decode_image(data, min_side=min_side)
    assert torch.equal(shown, torch.rot90(stored, k=-1, dims=(1, 2)))


@pytest.mark.parametrize(
    ("min_side", "expected"),
    [(None, (300, 400)), (200, (300, 400)), (150, (150, 200)), (75, (75, 100)), (30, (38, 50)), (1, (38, 50))],
)
def test_reduced_size_jpeg_decode(min_side, expected):
    data = encode(pixels(300, 400), "JPEG", quality=90)
    out = decode_image(data, min_side=min_side)
    assert out.shape[1:] == expected
    assert min(out.shape[1:]) >= min(min_side or 1, 38)
    full = decode_image(data).float()[None]
    shrunk = torch.nn.functional.interpolate(full, size=expected, mode="area")[0]
    correlation = torch.corrcoef(torch.stack([out.float().flatten(), shrunk.flatten()]))[0, 1]
    assert correlation > 0.95  # the same picture, at the smaller size


def test_min_side_leaves_other_formats_at_full_size():
    assert decode_image(encode(pixels(64, 64), "PNG"), min_side=8).shape == (3, 64, 64)


def test_truncated_jpeg_names_the_item():
    data = encode(pixels(200, 300), "JPEG", quality=90)
    with pytest.raises(ImageDecodeError, match=r"train/cat/1\.jpg") as info:
        decode_image(data[: len(data) // 2], item="train/cat/1.jpg")
    assert not isinstance(info.value, UnknownImageFormatError)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_truncated_jpeg_on_pillows_path_names_the_item():
    data = encode(pixels(200, 300), "JPEG", quality=90)
    with pytest.raises(ImageDecodeError, match="item-7"):
        decode_image(data[: len(data) // 2], item="item-7", min_side=50)


def test_corrupt_png_names_the_item():
    data = bytearray(encode(pixels(50, 50), "PNG"))
    data[60:200] = bytes(140)  # zero the compressed pixel data
    with pytest.raises(ImageDecodeError, match=r"broken\.png"):
        decode_image(bytes(data), item="broken.png")


def test_unknown_format_names_the_item():
    with pytest.raises(UnknownImageFormatError, match=r"notes\.txt"):
        decode_image(b"just some text, not an image", item="notes.txt")
    with pytest.raises(UnknownImageFormatError, match="<bytes>"):
        decode_image(b"")


def test_pixel_cap_refuses_before_decoding():
    data = encode(pixels(100, 100), "PNG")
    with pytest.raises(DecompressionBombError, match=r"big\.png.*10000 pixels.*max_pixels=9999"):
        decode_image(data, item="big.png", max_pixels=9999)
    assert decode_image(data, max_pixels=10_000).shape == (3, 100, 100)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` and that carries one empty data chunk."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


@pytest.mark.parametrize("side", [10_000, 40_000])  # 100 M pixels (over the cap), 1.6 G (over Pillow's own)
def test_decompression_bomb_with_default_cap(side):
    with pytest.warns() if side == 10_000 else contextlib.nullcontext():  # Pillow warns between 1x and 2x its cap
        with pytest.raises(DecompressionBombError, match=r"bomb\.png"):
            decode_image(png_header_only(side, side), item="bomb.png")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "CMYK"}, "mode"),
        ({"min_side": 0}, "min_side"),
        ({"min_side": True}, "min_side"),
        ({"max_pixels": 0}, "max_pixels"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        decode_image(encode(pixels(4, 4), "PNG"), **kwargs)


def test_bad_data_types_are_named():
    with pytest.raises(TypeError, match="data"):
        decode_image("a path, not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1-D uint8"):
        decode_image(torch.zeros(3, dtype=torch.float32))
