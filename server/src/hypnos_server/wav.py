"""WAV helpers: a 16-bit PCM header (fixed or open-ended for streams), a duration read from a header, a header check."""

from __future__ import annotations

import struct

from hypnos.errors import invalid_request

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


MIN_RATE, MAX_RATE = 1000, 384_000
MAX_CHANNELS = 16
_BITS = {1: (8, 16, 24, 32), 3: (32, 64), 0xFFFE: (8, 16, 24, 32, 64)}


def check_wav(data: bytes) -> None:
    """400 when data is a RIFF/WAVE file whose header a decoder would choke on; other containers pass untouched.

    Checked: a complete fmt chunk, a PCM or float encoding, 1..16 channels, a sample rate in 1 kHz..384 kHz,
    block_align = channels x bytes per sample, a data chunk holding whole frames.
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return
    fmt: tuple[int, ...] | None = None
    position = 12
    while position + 8 <= len(data):
        kind, size = struct.unpack_from("<4sI", data, position)
        body = position + 8
        if kind == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise invalid_request("The WAV file's fmt chunk is truncated")
            fmt = struct.unpack_from("<HHIIHH", data, body)
        elif kind == b"data":
            if fmt is None:
                raise invalid_request("The WAV file has no fmt chunk before its data chunk")
            _check_format(fmt)
            available = len(data) - body if size == OPEN_ENDED else min(size, len(data) - body)
            if available % fmt[4]:
                raise invalid_request("The WAV file's data chunk ends in the middle of a frame")
            return
        if size == OPEN_ENDED:
            break
        position = body + size + (size & 1)
    raise invalid_request("The WAV file has no fmt and data chunks")


def _check_format(fmt: tuple[int, ...]) -> None:
    tag, channels, rate, _, block_align, bits = fmt
    if tag not in _BITS or bits not in _BITS[tag]:
        raise invalid_request(f"The WAV encoding (format {tag}, {bits} bits) is not supported: send PCM or float")
    if not 1 <= channels <= MAX_CHANNELS:
        raise invalid_request(f"The WAV file declares {channels} channels (1 to {MAX_CHANNELS} are accepted)")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise invalid_request(f"The WAV sample rate {rate} Hz is outside {MIN_RATE}..{MAX_RATE} Hz")
    if block_align != channels * bits // 8:
        raise invalid_request(f"The WAV block_align {block_align} does not match {channels} channel(s) of {bits} bits")
