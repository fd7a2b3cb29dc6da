"""Media parts of a chat input (bytes the server decoded from the wire): images decoded with Pillow to RGB, audio
clips (WAV; other containers through PyAV) to mono float samples."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from hypnos.chat import ChatInput, ImagePart
from hypnos.config import LimitsConfig
from hypnos.errors import HypnosError, invalid_request
from hypnos.image_header import check_image_pixels, check_pixel_count

IMAGE, AUDIO = "image", "audio"


@dataclass(frozen=True)
class MediaItem:
    """One media part's decoded payload: RGB pixels for an image, mono float32 samples for audio."""

    kind: str
    width: int = 0
    height: int = 0
    data: bytes = b""  # RGB bytes (image) or little-endian float32 samples (audio)

    @property
    def samples(self) -> int:
        """Number of audio samples."""
        return len(self.data) // 4


def media_kinds(request: ChatInput) -> list[str]:
    """The kinds of the request's media parts, in prompt order."""
    return [IMAGE if isinstance(part, ImagePart) else AUDIO for part in request.media()]


def decode_image(data: bytes, *, max_bytes: int, max_pixels: int) -> MediaItem:
    """Image bytes (PNG, JPEG, WebP, GIF, BMP ...) to RGB pixels; 400 when unreadable, above max_pixels by its header
    (checked before Pillow decodes anything) or above max_bytes decoded."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > max_bytes:
        raise invalid_request(f"the image is larger than the server's limit of {max_bytes} bytes")
    check_image_pixels(data, max_pixels)
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            width, height = image.size
            check_pixel_count(width, height, max_pixels)
            if width * height * 3 > max_bytes:
                raise invalid_request(
                    f"the image decodes to {width}x{height} pixels, larger than the server's limit of {max_bytes} bytes"
                )
            rgb = image.convert("RGB")
            return MediaItem(IMAGE, width, height, rgb.tobytes())
    except HypnosError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):  # PIL's text: a BytesIO repr
        raise invalid_request("the image could not be decoded; send a PNG, JPEG, WebP, GIF or BMP image") from None


def decode_audio(data: bytes, *, sample_rate: int, max_bytes: int) -> MediaItem:
    """An audio clip to mono float32 samples at the projector's rate (hypnos.kit.audio: WAV, other containers through
    PyAV), at most max_bytes of decoded samples, refused before decoding when it declares more; 400 otherwise."""
    import numpy as np
    from hypnos.kit.audio import decode_audio as decode

    samples = decode(data, sample_rate=sample_rate, max_seconds=max_bytes / 4 / sample_rate)
    if samples.size == 0:
        raise invalid_request("the audio clip is empty")
    return MediaItem(AUDIO, data=np.ascontiguousarray(samples, dtype="<f4").tobytes())


def decode_wav(data: bytes, *, sample_rate: int) -> MediaItem:
    """WAV bytes to mono float32 samples at the projector's rate (at most an hour); 400 otherwise."""
    return decode_audio(data, sample_rate=sample_rate, max_bytes=3600 * 4 * sample_rate)


async def load_request_media(request: ChatInput, limits: LimitsConfig, *, sample_rate: int) -> list[Any]:
    """Decode every media part of a request in order, off the event loop."""
    import asyncio

    items: list[Any] = []
    for part in request.media():
        if isinstance(part, ImagePart):
            items.append(
                await asyncio.to_thread(
                    decode_image, part.data, max_bytes=limits.max_image_bytes, max_pixels=limits.max_image_pixels
                )
            )
        else:
            items.append(
                await asyncio.to_thread(
                    decode_audio, part.data, sample_rate=sample_rate, max_bytes=limits.max_audio_bytes
                )
            )
    return items
