"""WAV helpers: a 16-bit PCM header (fixed or open-ended for streams) and a duration read from a header."""

from __future__ import annotations

import struct

OPEN_ENDED = 0xFFFFFFFF


def wav_header(data_bytes: int | None, sample_rate: int = 24000, channels: int = 1, bits: int = 16) -> bytes:
    """A RIFF/WAVE header for PCM data; data_bytes None declares an open-ended stream (0xFFFFFFFF lengths)."""
    block_align = channels * bits // 8
    riff_size = OPEN_ENDED if data_bytes is None else 36 + data_bytes
    data_size = OPEN_ENDED if data_bytes is None else data_bytes
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff_size,
        b"WAVE",
        b"fmt ",
        16,
        1,
        channels,
        sample_rate,
        sample_rate * block_align,
        block_align,
        bits,
        b"data",
        data_size,
    )


def wav_duration(data: bytes) -> float | None:
    """Seconds of audio a WAV file holds, from its fmt and data chunks; None when it is not a WAV."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    byte_rate = 0
    position = 12
    while position + 8 <= len(data):
        kind, size = struct.unpack_from("<4sI", data, position)
        body = position + 8
        if kind == b"fmt " and size >= 16 and body + 16 <= len(data):
            byte_rate = struct.unpack_from("<I", data, body + 8)[0]
        elif kind == b"data":
            available = min(size, len(data) - body)
            return round(available / byte_rate, 3) if byte_rate else None
        position = body + size + (size & 1)
    return None
