"""Image sizes read from headers alone, and the pixel limit refused before any decoder runs."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypnos.config import LimitsConfig
from hypnos.errors import HypnosError
from hypnos.image_header import check_image_pixels, image_size


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk


def jpeg(width: int, height: int, sof: int = 0xC0) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + b"\0" * 9
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 5000) + b"\0" * 5000  # a big segment before the frame header
    frame = bytes([0xFF, sof]) + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + exif + frame + b"\xff\xda"


def webp(kind: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + kind + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


HEADERS = {
    "png": (png(640, 480), (640, 480)),
    "jpeg baseline": (jpeg(1920, 1080), (1920, 1080)),
    "jpeg progressive": (jpeg(300, 200, sof=0xC2), (300, 200)),
    "gif": (b"GIF89a" + struct.pack("<HH", 50, 40) + b"\0" * 10, (50, 40)),
    "bmp": (b"BM" + b"\0" * 16 + struct.pack("<ii", 32, -16) + b"\0" * 20, (32, 16)),
    "webp vp8x": (webp(b"VP8X", b"\0" * 4 + (999).to_bytes(3, "little") + (499).to_bytes(3, "little")), (1000, 500)),
    "webp vp8l": (webp(b"VP8L", b"\x2f" + ((99) | (49 << 14)).to_bytes(4, "little")), (100, 50)),
    "webp vp8": (webp(b"VP8 ", b"\0\0\0\x9d\x01\x2a" + struct.pack("<HH", 64, 48)), (64, 48)),
}


@pytest.mark.parametrize("name", list(HEADERS))
def test_sizes_come_from_the_header(name):
    data, size = HEADERS[name]
    assert image_size(data) == size


@pytest.mark.parametrize("data", [b"", b"not an image", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0\x00", b"GIF89a"])
def test_unknown_or_truncated_headers_have_no_size(data):
    assert image_size(data) is None


def test_the_limit_is_a_400_naming_the_size_and_the_setting():
    with pytest.raises(HypnosError) as raised:
        check_image_pixels(png(100_000, 100_000), LimitsConfig().max_image_pixels)
    assert raised.value.status == 400
    assert "100000x100000" in raised.value.message and "limits.max_image_pixels" in raised.value.message
    check_image_pixels(png(4096, 4096), LimitsConfig().max_image_pixels)
