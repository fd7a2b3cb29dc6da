"""WAV in and PCM out: read a RIFF/WAVE file's header and samples, turn float audio into 16-bit PCM."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

_OPEN_ENDED = 0xFFFFFFFF
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


@dataclass(frozen=True)
class WavAudio:
    """Decoded WAV samples (float32 in [-1, 1], mono) with the header's facts."""

    samples: np.ndarray
    sample_rate: int
    channels: int
    header_duration_secs: float


def is_wav(data: bytes) -> bool:
    """True when data starts like a RIFF/WAVE file."""
    return len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WAVE"


def read_wav(data: bytes) -> WavAudio | None:
    """Decode a PCM (8/16/24/32-bit) or float32 WAV, mixing channels down; None when it is not one we can read.

    The duration comes from the data chunk's declared size, or from the bytes present when the size is open-ended
    (0xFFFFFFFF, as streamed WAVs declare) or larger than the file.
    """
    if not is_wav(data):
        return None
    position, fmt, payload, declared = 12, None, None, 0
    while position + 8 <= len(data):
        chunk_id, size = data[position : position + 4], struct.unpack_from("<I", data, position + 4)[0]
        body_start = position + 8
        if chunk_id == b"fmt " and size >= 16:
            fmt = struct.unpack_from("<HHIIHH", data, body_start)
            if fmt[0] == _EXTENSIBLE and size >= 26:
                fmt = (struct.unpack_from("<H", data, body_start + 24)[0], *fmt[1:])
        elif chunk_id == b"data":
            declared = size
            end = len(data) if size == _OPEN_ENDED else min(len(data), body_start + size)
            payload = data[body_start:end]
            break
        if size == _OPEN_ENDED:
            return None
        position = body_start + size + (size & 1)
    if fmt is None or payload is None:
        return None
    format_tag, channels, sample_rate, _, block_align, bits = fmt
    if channels < 1 or sample_rate < 1 or block_align < 1:
        return None
    samples = _samples(payload[: len(payload) - len(payload) % block_align], format_tag, bits)
    if samples is None:
        return None
    frames = samples.reshape(-1, channels).mean(axis=1, dtype=np.float32) if channels > 1 else samples
    present = len(payload) // block_align
    declared_frames = declared // block_align if declared != _OPEN_ENDED else present
    duration = min(declared_frames, present) / sample_rate
    return WavAudio(
        samples=frames.astype(np.float32), sample_rate=sample_rate, channels=channels, header_duration_secs=duration
    )


def _samples(payload: bytes, format_tag: int, bits: int) -> np.ndarray | None:
    if format_tag == _PCM and bits == 16:
        return np.frombuffer(payload, dtype="<i2").astype(np.float32) / 32768.0
    if format_tag == _PCM and bits == 8:
        return (np.frombuffer(payload, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    if format_tag == _PCM and bits == 24:
        raw = np.frombuffer(payload, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        values = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        values = np.where(values >= 1 << 23, values - (1 << 24), values)
        return values.astype(np.float32) / float(1 << 23)
    if format_tag == _PCM and bits == 32:
        return np.frombuffer(payload, dtype="<i4").astype(np.float32) / float(1 << 31)
    if format_tag == _FLOAT and bits == 32:
        return np.frombuffer(payload, dtype="<f4").astype(np.float32)
    return None


def to_pcm16(audio: np.ndarray) -> bytes:
    """Float audio in [-1, 1] as 16-bit little-endian PCM bytes (clipped)."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def wav_bytes(pcm16: bytes, sample_rate: int) -> bytes:
    """A complete mono 16-bit WAV file around the PCM bytes."""
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + len(pcm16),
        b"WAVE",
        b"fmt ",
        16,
        1,
        1,
        sample_rate,
        sample_rate * 2,
        2,
        16,
        b"data",
        len(pcm16),
    )
    return header + pcm16
