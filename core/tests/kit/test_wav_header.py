"""WAV header helpers."""

from __future__ import annotations

from hypnos.kit.audio import wav_duration, wav_header


def test_duration_from_header():
    pcm = b"\x00\x00" * 24000 * 2
    assert wav_duration(wav_header(len(pcm)) + pcm) == 2.0


def test_not_a_wav():
    assert wav_duration(b"ID3....") is None
    assert wav_duration(b"") is None
