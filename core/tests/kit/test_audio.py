"""The kit's audio decoder: WAV formats, bounds checked before decoding, malformed headers refused with 400."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypnos.engine import TranscriptionInput
from hypnos.errors import HypnosError
from hypnos.kit.audio import (
    audio_file,
    check_wav,
    decode_audio,
    pcm16_samples,
    read_audio,
    resample,
    resample_pcm16,
    to_pcm16,
    transcription_audio,
    wav_bytes,
)


def _wav(
    fmt: tuple[int, int, int, int, int, int], payload: bytes, *, data_size: int | None = None, fmt_size: int = 16
) -> bytes:
    body = struct.pack("<HHIIHH", *fmt)[:fmt_size]
    size = len(payload) if data_size is None else data_size
    chunks = b"fmt " + struct.pack("<I", fmt_size) + body + b"data" + struct.pack("<I", size) + payload
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def _tone(rate: int, secs: float) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * 440 * np.arange(int(rate * secs)) / rate)).astype(np.float32)


def test_pcm16_mono_roundtrip_and_resample() -> None:
    tone = _tone(24000, 0.5)
    audio = read_audio(wav_bytes(to_pcm16(tone), 24000), sample_rate=24000, max_seconds=10)
    assert audio.duration_secs == pytest.approx(0.5)
    assert np.max(np.abs(audio.samples - tone)) < 1e-3
    resampled = decode_audio(wav_bytes(to_pcm16(tone), 24000), sample_rate=16000, max_seconds=10)
    assert abs(resampled.size - 8000) <= 64 and resampled.dtype == np.float32


def test_resample_keeps_duration_and_pitch() -> None:
    tone = _tone(22050, 1.0)  # a Piper voice's rate, up to the speech route's
    out = resample(tone, 22050, 24000, frames=True)
    assert out.size == 24000 and out.dtype == np.float32
    assert np.allclose(out[::240], 0.5 * np.sin(2 * np.pi * 440 * np.arange(0, 24000, 240) / 24000), atol=0.02)
    assert resample(tone, 22050, 22050) is tone
    pcm = to_pcm16(_tone(24000, 0.1))
    assert abs(len(resample_pcm16(pcm, 24000, 22050)) - 2205 * 2) <= 4 and resample_pcm16(pcm, 24000, 24000) is pcm


def test_frames_resampled_one_by_one_join_into_the_whole() -> None:
    whole = _tone(24000, 0.2)
    frames = [resample(pcm16_samples(to_pcm16(f)), 24000, 16000, frames=True) for f in np.split(whole, 10)]
    assert [frame.size for frame in frames] == [320] * 10  # a realtime session's 20 ms frames, as Silero takes them
    assert np.max(np.abs(np.concatenate(frames) - resample(whole, 24000, 16000, frames=True))) < 1e-3


@pytest.mark.parametrize("bits", [8, 24, 32])
def test_other_pcm_widths_and_stereo(bits: int) -> None:
    tone = _tone(8000, 0.25)
    if bits == 8:
        payload = np.repeat((tone * 127 + 128).astype(np.uint8), 2).tobytes()
    elif bits == 24:
        ints = np.repeat((tone * ((1 << 23) - 1)).astype("<i4"), 2)
        payload = b"".join(int(v).to_bytes(3, "little", signed=True) for v in ints)
    else:
        payload = np.repeat((tone * ((1 << 31) - 1)).astype("<i4"), 2).tobytes()
    data = _wav((1, 2, 8000, 8000 * 2 * bits // 8, 2 * bits // 8, bits), payload)
    out = decode_audio(data, sample_rate=8000, max_seconds=10)
    assert out.size == tone.size and np.max(np.abs(out - tone)) < 0.02


def test_float32_wav() -> None:
    tone = _tone(16000, 0.1)
    out = decode_audio(
        _wav((3, 1, 16000, 64000, 4, 32), tone.astype("<f4").tobytes()), sample_rate=16000, max_seconds=1
    )
    assert np.allclose(out, tone)


def test_one_hertz_wav_refused_before_decoding() -> None:
    """Issue 13 item 2: a 644-byte WAV declaring 1 Hz would be 300 s of audio after resampling: below the one set
    of limits' lowest rate (1 kHz), it is refused by its header."""
    data = _wav((1, 1, 1, 2, 2, 16), b"\x01\x00" * 300)
    assert len(data) == 644
    with pytest.raises(HypnosError) as caught:
        decode_audio(data, sample_rate=16000, max_seconds=120)
    assert caught.value.status == 400 and "a sample rate of 1 Hz" in caught.value.message
    with pytest.raises(HypnosError):
        check_wav(data)  # the server's upload check refuses it by the same limits


def test_a_long_wav_is_refused_before_decoding() -> None:
    data = _wav((1, 1, 1000, 2000, 2, 16), b"\x01\x00" * 3000)
    with pytest.raises(HypnosError) as caught:
        decode_audio(data, sample_rate=16000, max_seconds=2)
    assert caught.value.status == 400 and "3.0 s" in caught.value.message


def test_declared_size_beyond_file_counts_what_is_present() -> None:
    data = _wav((1, 1, 8000, 16000, 2, 16), b"\x00\x00" * 800, data_size=0x7FFFFFF0)
    assert read_audio(data, sample_rate=8000, max_seconds=1).duration_secs == pytest.approx(0.1)


@pytest.mark.parametrize(
    "data",
    [
        _wav((1, 1, 16000, 32000, 2, 16), b"\x00" * 10, fmt_size=12),  # truncated fmt chunk
        _wav((1, 2, 16000, 64000, 3, 16), b"\x00" * 12),  # bad block_align
        _wav((1, 0, 16000, 0, 0, 16), b"\x00" * 12),  # no channels
        _wav((1, 1, 0, 0, 2, 16), b"\x00" * 12),  # zero rate
        _wav((1, 1, 4_000_000_000, 0, 2, 16), b"\x00" * 12),  # absurd rate
        _wav((2, 1, 16000, 32000, 2, 16), b"\x00" * 12),  # ADPCM: unsupported
        b"RIFF\x10\x00\x00\x00WAVEfmt ",  # cut inside the chunk list
        b"RIFF\x00\x00\x00\x00WAVEdata\x04\x00\x00\x00\x00\x00\x00\x00",  # data before fmt
    ],
)
def test_malformed_wav_is_400_without_library_text(data: bytes) -> None:
    with pytest.raises(HypnosError) as caught:
        decode_audio(data, sample_rate=16000, max_seconds=60)
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    assert "Error" not in caught.value.message


def test_odd_sample_count_in_stereo_drops_the_partial_frame() -> None:
    data = _wav((1, 2, 8000, 32000, 4, 16), b"\x00\x10" * 5)
    assert decode_audio(data, sample_rate=8000, max_seconds=1).size == 2


def test_not_audio_is_400() -> None:
    with pytest.raises(HypnosError) as caught:
        decode_audio(b"ID3 this is not audio at all" * 10, sample_rate=16000, max_seconds=60)
    assert caught.value.status == 400
    with pytest.raises(HypnosError):
        decode_audio(b"", sample_rate=16000, max_seconds=60)


def test_open_ended_streamed_wav_reads_what_is_present() -> None:
    tone = _tone(24000, 1.0)
    data = bytearray(wav_bytes(to_pcm16(tone), 24000))
    data[4:8] = data[40:44] = b"\xff\xff\xff\xff"
    audio = read_audio(bytes(data), sample_rate=24000, max_seconds=2)
    assert audio.duration_secs == pytest.approx(1.0) and audio.samples.size == 24000


def test_pcm_handed_with_its_rate_reads_as_its_wav_would() -> None:
    pcm = to_pcm16(_tone(24000, 0.5))
    handed = TranscriptionInput(audio=pcm, pcm_rate=24000)
    as_file = TranscriptionInput(audio=wav_bytes(pcm, 24000), filename="turn.wav")
    direct = transcription_audio(handed, sample_rate=16000, max_seconds=5)
    parsed = transcription_audio(as_file, sample_rate=16000, max_seconds=5)
    assert direct.duration_secs == parsed.duration_secs == 0.5
    assert np.array_equal(direct.samples, parsed.samples)
    assert audio_file(handed) == (wav_bytes(pcm, 24000), "audio.wav")  # for an engine that takes files
    assert audio_file(as_file) == (as_file.audio, "turn.wav")
    with pytest.raises(HypnosError) as caught:
        transcription_audio(handed, sample_rate=16000, max_seconds=0.25)
    assert caught.value.status == 400 and "0.5 s" in caught.value.message
