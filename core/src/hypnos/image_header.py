"""Image width and height from the header (PNG, JPEG, JPEG 2000, GIF, WebP, BMP): the pixel limit, checked before
decoding."""

from __future__ import annotations

import importlib.util
import struct
import warnings

from hypnos.errors import HypnosError, invalid_request

_JP2_SIGNATURE = b"\x00\x00\x00\x0cjP  \r\n\x87\n"
_J2K_START = b"\xff\x4f\xff\x51"  # a JPEG 2000 codestream: SOC, then its SIZ marker
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header; None for a format this reader does not know or a header it cannot find."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            return struct.unpack(">II", data[16:24])
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return struct.unpack("<HH", data[6:10])
        if data[:2] == b"BM":
            width, height = struct.unpack("<ii", data[18:26])
            return abs(width), abs(height)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data[:2] == b"\xff\xd8":
            return _jpeg_size(data)
        if data[:12] == _JP2_SIGNATURE or data[:4] == _J2K_START:
            return _jpx_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if kind == b"VP8L" and data[20:21] == b"\x2f":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:  # junk between segments: libjpeg skips to the next marker, and so does this
            position = data.find(b"\xff", position)
            if position < 0:
                return None
            continue
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            position += 2
            continue
        (length,) = struct.unpack(">H", data[position + 2 : position + 4])
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return width, height
        if marker == 0xDA:  # start of scan before any frame header
            return None
        position += 2 + length
    return None


def _jpx_size(data: bytes) -> tuple[int, int] | None:
    """The image area of a JPEG 2000 codestream's SIZ marker (found inside a JP2 file's boxes too)."""
    start = data.find(_J2K_START)
    if start < 0:
        return None
    xsiz, ysiz, xosiz, yosiz = struct.unpack(">IIII", data[start + 8 : start + 24])
    return max(0, xsiz - xosiz), max(0, ysiz - yosiz)


def check_image_pixels(data: bytes, max_pixels: int, what: str = "the image") -> None:
    """400 when the header declares more than max_pixels (limits.max_image_pixels); unknown formats pass."""
    size = image_size(data)
    if size is not None:
        check_pixel_count(size[0], size[1], max_pixels, what)


def check_pixel_count(width: int, height: int, max_pixels: int, what: str = "the image") -> None:
    """400 when width x height is above max_pixels (limits.max_image_pixels)."""
    if width * height > max_pixels:
        raise invalid_request(
            f"{what} is {width}x{height} pixels, above the server's limit of {max_pixels} (limits.max_image_pixels)"
        )


def limit_image_decoders(max_pixels: int) -> None:
    """Pillow's decompression-bomb limit in this process set to max_pixels: an image declaring more raises instead of
    decoding, whichever code opens it (nothing without Pillow)."""
    if importlib.util.find_spec("PIL") is None:
        return
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = max_pixels
    warnings.simplefilter("error", Image.DecompressionBombWarning)  # between the limit and twice it: an error too


def image_bomb_error(error: BaseException, max_pixels: int) -> HypnosError | None:
    """The 400 for Pillow's decompression-bomb error or warning (None for any other error)."""
    if type(error).__name__ not in ("DecompressionBombError", "DecompressionBombWarning"):
        return None
    return invalid_request(
        f"an image of the request is above the server's limit of {max_pixels} pixels (limits.max_image_pixels)"
    )
