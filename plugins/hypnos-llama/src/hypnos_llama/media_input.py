"""Media parts of a chat request: images decoded with Pillow to RGB, audio clips (WAV; other containers through
PyAV) to mono float samples."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from hypnos.config import LimitsConfig
from hypnos.errors import HypnosError, invalid_request
from hypnos.image_header import check_image_pixels, check_pixel_count
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
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as error:
        raise invalid_request(f"the image could not be decoded: {error}") from None


def decode_audio(data: bytes, *, sample_rate: int, max_bytes: int) -> MediaItem:
    """An audio clip to mono float32 samples at the projector's rate: WAV here, other containers (MP3, FLAC, Ogg,
    M4A, WebM...) through PyAV when it is installed (best effort, as the spec allows); 400 when it cannot be read."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return decode_wav(data, sample_rate=sample_rate)
    return _decode_container(data, sample_rate=sample_rate, max_bytes=max_bytes)


def _decode_container(data: bytes, *, sample_rate: int, max_bytes: int) -> MediaItem:
    """Any container FFmpeg reads, resampled to mono float32; at most max_bytes of decoded samples."""
    import numpy as np

    try:
        import av
    except ImportError:
        raise invalid_request(
            "the audio is not WAV, and this server decodes other containers only with PyAV "
            "installed (pip install av, or the hypnos-llama[audio] extra)"
        ) from None
    chunks: list[Any] = []
    decoded = 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise invalid_request("the audio file holds no audio stream")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
            for frame in container.decode(audio=0):
                for out in resampler.resample(frame):
                    chunk = out.to_ndarray().reshape(-1)
                    decoded += chunk.size * 4
                    if decoded > max_bytes:
                        raise invalid_request(
                            f"the audio decodes to more than the server's limit of {max_bytes} bytes of samples"
                        )
                    chunks.append(chunk)
            chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    except HypnosError:
        raise
    except (av.error.FFmpegError, ValueError, EOFError) as error:
        raise invalid_request(f"the audio could not be decoded: {error}") from None
    samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    if samples.size == 0:
        raise invalid_request("the audio clip is empty")
    return MediaItem(AUDIO, data=np.ascontiguousarray(samples, dtype="<f4").tobytes())


def decode_wav(data: bytes, *, sample_rate: int) -> MediaItem:
    """WAV bytes (PCM 8/16/24/32-bit or float) to mono float32 samples at the projector's rate; 400 otherwise."""
    import numpy as np

    try:
        samples, rate = _read_wav(data)
    except (ValueError, EOFError) as error:
        raise invalid_request(f"the audio could not be decoded as WAV: {error}") from None
    if samples.size == 0:
        raise invalid_request("the audio clip is empty")
    if rate != sample_rate:  # linear resampling is enough for speech features
        count = max(1, round(samples.size * sample_rate / rate))
        samples = np.interp(np.linspace(0, samples.size - 1, count), np.arange(samples.size), samples)
    return MediaItem(AUDIO, data=np.ascontiguousarray(samples, dtype="<f4").tobytes())


def _read_wav(data: bytes) -> tuple[Any, int]:
    import numpy as np

    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE file")
    offset, fmt, payload = 12, None, None
    while offset + 8 <= len(data):
        chunk_id, size = data[offset : offset + 4], int.from_bytes(data[offset + 4 : offset + 8], "little")
        body = data[offset + 8 : offset + 8 + size]
        if chunk_id == b"fmt ":
            fmt = body
        elif chunk_id == b"data":
            payload = body
        offset += 8 + size + (size & 1)
    if fmt is None or payload is None or len(fmt) < 16:
        raise ValueError("missing fmt or data chunk")
    tag = int.from_bytes(fmt[0:2], "little")
    channels = max(1, int.from_bytes(fmt[2:4], "little"))
    rate = int.from_bytes(fmt[4:8], "little")
    bits = int.from_bytes(fmt[14:16], "little")
    if tag == 0xFFFE and len(fmt) >= 26:  # WAVE_FORMAT_EXTENSIBLE: the subformat's first two bytes
        tag = int.from_bytes(fmt[24:26], "little")
    width = bits // 8
    usable = len(payload) - len(payload) % (width * channels or 1)
    raw = payload[:usable]
    if tag == 3 and bits in (32, 64):
        samples = np.frombuffer(raw, dtype="<f4" if bits == 32 else "<f8").astype(np.float32)
    elif tag == 1 and bits == 8:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128) / 128
    elif tag == 1 and bits == 16:
        samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768
    elif tag == 1 and bits == 24:
        triples = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        values = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        samples = (np.where(values >= 1 << 23, values - (1 << 24), values)).astype(np.float32) / (1 << 23)
    elif tag == 1 and bits == 32:
        samples = np.frombuffer(raw, dtype="<i4").astype(np.float32) / (1 << 31)
    else:
        raise ValueError(f"unsupported WAV encoding (format {tag}, {bits} bits)")
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    return samples, rate


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
                media = await load_media_url(
                    part.image_url.url,
                    max_bytes=limits.max_image_bytes,
                    allow_remote=limits.allow_remote_image_urls,
                    allow_private=limits.allow_private_urls,
                    what="image",
                )
                items.append(
                    await asyncio.to_thread(
                        decode_image, media.data, max_bytes=limits.max_image_bytes, max_pixels=limits.max_image_pixels
                    )
                )
            elif part.type == "input_audio":
                if part.input_audio is None:
                    raise invalid_request("an input_audio part has no `input_audio`")
                raw = decode_base64(part.input_audio.data, max_bytes=limits.max_audio_bytes, what="audio")
                items.append(
                    await asyncio.to_thread(
                        decode_audio, raw, sample_rate=sample_rate, max_bytes=limits.max_audio_bytes
                    )
                )
    return items
