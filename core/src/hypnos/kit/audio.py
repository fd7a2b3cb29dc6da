"""The one audio module: the WAV reader, writer and checker under one set of limits, the decoder every engine uses
(WAV natively, other containers through PyAV, bounded before decoding) and the one resampler.

Every refusal is a 400 invalid_request_error whose message never echoes library exception text. The WAV header
functions need no numpy (the server checks uploads with them); decoding and resampling import it when called.
"""

from __future__ import annotations

import io
import logging
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hypnos.engine_io import TranscriptionInput
from hypnos.errors import HypnosError, invalid_request

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

OPEN_ENDED = 0xFFFFFFFF  # a streamed WAV's RIFF and data sizes: the length is not known yet
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_SUPPORTED = frozenset({(_PCM, 8), (_PCM, 16), (_PCM, 24), (_PCM, 32), (_FLOAT, 32), (_FLOAT, 64)})
# the one set of limits of a WAV header, for uploads checked by the server and audio decoded by an engine
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 1_000, 768_000
MAX_CHANNELS = 32


@dataclass(frozen=True)
class DecodedAudio:
    """Mono float32 samples at `sample_rate`, and the duration (the WAV header's, when the input is a WAV)."""

    samples: np.ndarray
    sample_rate: int
    duration_secs: float


@dataclass(frozen=True)
class WavHeader:
    """A checked RIFF/WAVE header: the format, and where the sample bytes are."""

    format_tag: int
    channels: int
    sample_rate: int
    block_align: int
    bits: int
    start: int
    end: int
    declared_frames: int

    @property
    def frames(self) -> int:
        """Whole frames present (declared, or present when the size is open-ended or larger than the file)."""
        return min(self.declared_frames, (self.end - self.start) // self.block_align)


def is_wav(data: bytes) -> bool:
    """True when data starts like a RIFF/WAVE file."""
    return len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WAVE"


def _malformed(reason: str) -> HypnosError:
    return invalid_request(f"the audio is not a well-formed WAV file: {reason}")


def read_wav_header(data: bytes) -> WavHeader:
    """Walk the chunks of a RIFF/WAVE file and check its fmt chunk; 400 on anything malformed or unsupported."""
    if not is_wav(data):
        raise _malformed("no RIFF/WAVE signature")
    position, fmt = 12, None
    while position + 8 <= len(data):
        chunk_id, size = data[position : position + 4], struct.unpack_from("<I", data, position + 4)[0]
        body = position + 8
        if chunk_id == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise _malformed("the fmt chunk is truncated")
            fmt = list(struct.unpack_from("<HHIIHH", data, body))
            if fmt[0] == _EXTENSIBLE:
                if size < 26 or body + 26 > len(data):
                    raise _malformed("the extensible fmt chunk is truncated")
                fmt[0] = struct.unpack_from("<H", data, body + 24)[0]
        elif chunk_id == b"data":
            if fmt is None:
                raise _malformed("the data chunk comes before the fmt chunk")
            return _checked(fmt, data, body, size)
        if size == OPEN_ENDED:
            raise _malformed("a chunk before the data chunk has an open-ended size")
        position = body + size + (size & 1)
    raise _malformed("no fmt chunk" if fmt is None else "no data chunk")


def _checked(fmt: list[int], data: bytes, start: int, size: int) -> WavHeader:
    format_tag, channels, rate, _, block_align, bits = fmt
    if (format_tag, bits) not in _SUPPORTED:
        raise invalid_request(
            f"the WAV encoding (format {format_tag}, {bits} bits) is not supported; send 8/16/24/32-bit PCM "
            "or 32/64-bit float"
        )
    if not 1 <= channels <= MAX_CHANNELS:
        raise _malformed(f"{channels} channels")
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise _malformed(f"a sample rate of {rate} Hz (accepted: {MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz)")
    if block_align != channels * bits // 8:
        raise _malformed(f"block_align {block_align} does not match {channels} channels of {bits} bits")
    end = len(data) if size == OPEN_ENDED else min(len(data), start + size)
    declared = (end - start) // block_align if size == OPEN_ENDED else size // block_align
    return WavHeader(format_tag, channels, rate, block_align, bits, start, end, declared)


def check_wav(data: bytes) -> None:
    """400 when data is a RIFF/WAVE file a decoder would choke on (its header, or a data chunk ending mid-frame);
    other containers pass untouched (the engine's decoder judges them)."""
    if not is_wav(data):
        return
    header = read_wav_header(data)
    if (header.end - header.start) % header.block_align:
        raise _malformed("the data chunk ends in the middle of a frame")


def wav_duration(data: bytes) -> float | None:
    """Seconds of audio a WAV file holds (the frames present); None when it is not a readable WAV."""
    try:
        header = read_wav_header(data)
    except HypnosError:
        return None
    return round(header.frames / header.sample_rate, 3)


def wav_header(data_bytes: int | None, sample_rate: int = 24000, channels: int = 1, bits: int = 16) -> bytes:
    """A RIFF/WAVE header for PCM data; data_bytes None declares an open-ended stream (0xFFFFFFFF sizes)."""
    block_align = channels * bits // 8
    riff_size = OPEN_ENDED if data_bytes is None else 36 + data_bytes
    data_size = OPEN_ENDED if data_bytes is None else data_bytes
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        *(b"RIFF", riff_size, b"WAVE", b"fmt ", 16, _PCM, channels, sample_rate, sample_rate * block_align),
        *(block_align, bits, b"data", data_size),
    )


def wav_bytes(pcm16: bytes, sample_rate: int) -> bytes:
    """A complete mono 16-bit WAV file around the PCM bytes."""
    return wav_header(len(pcm16), sample_rate) + pcm16


def _samples(payload: bytes, format_tag: int, bits: int) -> np.ndarray:
    import numpy as np

    if format_tag == _FLOAT:
        floats = np.frombuffer(payload, dtype="<f4" if bits == 32 else "<f8").astype(np.float32)
        return np.nan_to_num(floats, nan=0.0, posinf=1.0, neginf=-1.0)
    if bits == 16:
        return pcm16_samples(payload)
    if bits == 8:
        return (np.frombuffer(payload, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    if bits == 24:
        raw = np.frombuffer(payload, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        values = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        values = np.where(values >= 1 << 23, values - (1 << 24), values)
        return values.astype(np.float32) / float(1 << 23)
    return np.frombuffer(payload, dtype="<i4").astype(np.float32) / float(1 << 31)


def _too_long(seconds: float, max_seconds: float) -> HypnosError:
    return invalid_request(
        f"the audio lasts {seconds:.1f} s, over this model's limit of {max_seconds:g} s; send a shorter clip"
    )


def _pyav() -> Any:
    """PyAV, or None when it is not installed."""
    try:
        import av
    except ImportError:
        return None
    return av


def resample(samples: np.ndarray, rate: int, target: int, *, frames: bool = False) -> np.ndarray:
    """Mono float audio at target Hz: PyAV's filtered resampler when installed (as faster-whisper decodes), else
    linear interpolation; `frames`: always linear, for a stream's short frames (a filter's start and flush would
    smear every frame's edges). The same array when the rates match."""
    import numpy as np

    if rate == target or samples.size == 0:
        return samples.astype(np.float32, copy=False)
    av = None if frames else _pyav()
    if av is None:
        count = max(1, round(samples.size * target / rate))
        positions = np.arange(count) * (rate / target)
        linear: np.ndarray = np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
        return linear
    frame = av.AudioFrame.from_ndarray(
        (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16).reshape(1, -1), format="s16", layout="mono"
    )
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=target)
    out = [*resampler.resample(frame), *resampler.resample(None)]
    if not out:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in out]).astype(np.float32) / 32768.0


def pcm16_samples(pcm: bytes) -> np.ndarray:
    """16-bit little-endian PCM bytes as float32 samples in [-1, 1) (a trailing odd byte dropped)."""
    import numpy as np

    samples: np.ndarray = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0
    return samples


def resample_pcm16(pcm: bytes, rate: int, target: int) -> bytes:
    """16-bit little-endian mono PCM from `rate` to `target` Hz through resample(); the same bytes when they match."""
    if rate == target or not pcm:
        return pcm
    return to_pcm16(resample(pcm16_samples(pcm), rate, target))


def read_wav(data: bytes, *, sample_rate: int, max_seconds: float) -> DecodedAudio:
    """A WAV's samples, mono, at sample_rate; refused before decoding when its declared length exceeds max_seconds."""
    import numpy as np

    header = read_wav_header(data)
    duration = header.frames / header.sample_rate
    if duration > max_seconds:
        raise _too_long(duration, max_seconds)
    payload = data[header.start : header.start + header.frames * header.block_align]
    samples = _samples(payload, header.format_tag, header.bits)
    if header.channels > 1:
        samples = samples.reshape(-1, header.channels).mean(axis=1, dtype=np.float32)
    return DecodedAudio(resample(samples, header.sample_rate, sample_rate), sample_rate, duration)


def _container(data: bytes, *, sample_rate: int, max_seconds: float) -> DecodedAudio:
    import numpy as np

    try:
        import av
    except ImportError:
        raise invalid_request(
            "the audio is not WAV, and this server decodes other containers only with PyAV installed "
            "(pip install av); send a 16-bit PCM WAV"
        ) from None
    limit = int(max_seconds * sample_rate)
    chunks: list[Any] = []
    decoded = 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise invalid_request("the audio file holds no audio stream")
            declared = _declared_seconds(container)
            if declared is not None and declared > max_seconds:
                raise _too_long(declared, max_seconds)
            resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
            for frame in container.decode(audio=0):
                for out in resampler.resample(frame):
                    chunk = out.to_ndarray().reshape(-1)
                    decoded += chunk.size
                    if decoded > limit:
                        raise _too_long(decoded / sample_rate, max_seconds)
                    chunks.append(chunk)
            chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    except HypnosError:
        raise
    except Exception as error:  # PyAV raises several error types for undecodable input; they stay in the log
        logger.info("audio could not be decoded: %r", error)
        raise invalid_request("the audio could not be decoded; send a 16-bit PCM WAV") from None
    samples = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)
    return DecodedAudio(samples[:limit], sample_rate, min(samples.size, limit) / sample_rate)


def _declared_seconds(container: Any) -> float | None:
    """The container's or the audio stream's declared duration, when either declares one."""
    if container.duration:
        return float(container.duration) / 1_000_000
    stream = container.streams.audio[0]
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    return None


def read_audio(data: bytes, *, sample_rate: int, max_seconds: float) -> DecodedAudio:
    """Decode any supported audio to mono float32 at sample_rate, with its duration; 400 when refused."""
    if not data:
        raise invalid_request("the audio file is empty")
    if is_wav(data):
        return read_wav(data, sample_rate=sample_rate, max_seconds=max_seconds)
    return _container(data, sample_rate=sample_rate, max_seconds=max_seconds)


def read_pcm16(pcm: bytes, rate: int, *, sample_rate: int, max_seconds: float) -> DecodedAudio:
    """Raw 16-bit little-endian mono PCM at `rate` as mono float32 at sample_rate (400 when too long)."""
    duration = len(pcm) // 2 / rate
    if duration > max_seconds:
        raise _too_long(duration, max_seconds)
    return DecodedAudio(resample(pcm16_samples(pcm), rate, sample_rate), sample_rate, duration)


def transcription_audio(job: TranscriptionInput, *, sample_rate: int, max_seconds: float) -> DecodedAudio:
    """A transcription job's audio as mono float32 at sample_rate: its PCM as handed (pcm_rate), else its file."""
    if job.pcm_rate is not None:
        return read_pcm16(job.audio, job.pcm_rate, sample_rate=sample_rate, max_seconds=max_seconds)
    return read_audio(job.audio, sample_rate=sample_rate, max_seconds=max_seconds)


def audio_file(job: TranscriptionInput) -> tuple[bytes, str | None]:
    """A transcription job's audio as a file and its name, for an engine that takes files: PCM in a WAV."""
    if job.pcm_rate is not None:
        return wav_bytes(job.audio, job.pcm_rate), "audio.wav"
    return job.audio, job.filename


def decode_audio(data: bytes, *, sample_rate: int, max_seconds: float) -> np.ndarray:
    """Decode any supported audio to a mono float32 array at sample_rate (400 when malformed or too long)."""
    return read_audio(data, sample_rate=sample_rate, max_seconds=max_seconds).samples


def to_pcm16(audio: np.ndarray) -> bytes:
    """Float audio in [-1, 1] as 16-bit little-endian PCM bytes (clipped)."""
    import numpy as np

    pcm: bytes = (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
    return pcm
