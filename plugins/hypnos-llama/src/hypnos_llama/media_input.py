"""Media parts of a chat request: images decoded with Pillow to RGB, audio clips (WAV; other containers through
PyAV) to mono float samples."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from hypnos.config import LimitsConfig
from hypnos.errors import HypnosError, invalid_request
from hypnos.openai import ChatCompletionRequest

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


def media_kinds(request: ChatCompletionRequest) -> list[str]:
    """The kinds of the request's media parts, in prompt order."""
    kinds = []
    for message in request.messages:
        if isinstance(message.content, list):
            for part in message.content:
                if part.type == "image_url":
                    kinds.append(IMAGE)
                elif part.type == "input_audio":
                    kinds.append(AUDIO)
    return kinds


def decode_image(data: bytes, *, max_bytes: int) -> MediaItem:
    """Image bytes (PNG, JPEG, WebP, GIF, BMP ...) to RGB pixels; 400 when unreadable or above max_bytes decoded."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > max_bytes:
        raise invalid_request(f"the image is larger than the server's limit of {max_bytes} bytes")
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height * 3 > max_bytes:
                raise invalid_request(f"the image decodes to {width}x{height} pixels, larger than the server's "
                                      f"limit of {max_bytes} bytes")
            rgb = image.convert("RGB")
            return MediaItem(IMAGE, width, height, rgb.tobytes())
    except HypnosError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as error:
        raise invalid_request(f"the image could not be decoded: {error}") from None


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


async def load_request_media(request: ChatCompletionRequest, limits: LimitsConfig, *, sample_rate: int) -> list[Any]:
    """Fetch and decode every media part of a request in order (data: or checked http(s) URLs, base64 audio)."""
    import asyncio

    from hypnos.media import decode_base64, load_media_url

    items: list[Any] = []
    for message in request.messages:
        if not isinstance(message.content, list):
            continue
        for part in message.content:
            if part.type == "image_url":
                if part.image_url is None:
                    raise invalid_request("an image_url part has no `image_url`")
                media = await load_media_url(part.image_url.url, max_bytes=limits.max_image_bytes,
                                             allow_remote=limits.allow_remote_image_urls,
                                             allow_private=limits.allow_private_urls, what="image")
                items.append(await asyncio.to_thread(decode_image, media.data, max_bytes=limits.max_image_bytes))
            elif part.type == "input_audio":
                if part.input_audio is None:
                    raise invalid_request("an input_audio part has no `input_audio`")
                raw = decode_base64(part.input_audio.data, max_bytes=limits.max_audio_bytes, what="audio")
                items.append(await asyncio.to_thread(decode_audio, raw, sample_rate=sample_rate,
                                                     max_bytes=limits.max_audio_bytes))
    return items
