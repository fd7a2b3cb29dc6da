"""A transcription answered in the OpenAI `response_format`s: json, text, srt, vtt, verbose_json."""

from __future__ import annotations

from typing import Any

from hypnos.engine import TranscriptionResult, TranscriptionSegment
from hypnos.errors import invalid_request

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
MEDIA_TYPES = {"text": "text/plain", "srt": "text/plain", "vtt": "text/vtt"}  # Litestar adds charset=utf-8


def check_format(requested: str | None) -> str:
    """The response_format asked for (json when absent), or 400 naming the accepted values."""
    if requested is None or requested == "":
        return "json"
    if requested not in FORMATS:
        raise invalid_request(f"Invalid value for `response_format`: `{requested}` ({', '.join(FORMATS)})")
    return requested


def segments_of(result: TranscriptionResult, duration: float | None) -> list[TranscriptionSegment]:
    """The engine's timed segments, or the whole transcript as one segment spanning the audio."""
    if result.segments:
        return result.segments
    return [TranscriptionSegment(start=0.0, end=duration or 0.0, text=result.text)]


def _clock(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt(segments: list[TranscriptionSegment]) -> str:
    """SubRip cues: index, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, text, blank line."""
    cues = [
        f"{index}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n"
        for index, s in enumerate(segments, start=1)
    ]
    return "\n".join(cues)


def vtt(segments: list[TranscriptionSegment]) -> str:
    """WebVTT: the WEBVTT line, then `HH:MM:SS.mmm --> HH:MM:SS.mmm` cues."""
    cues = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)


def verbose(result: TranscriptionResult, duration: float | None, language: str | None) -> dict[str, Any]:
    """OpenAI's verbose_json body: task, language, duration, text and the segments (id, start, end, text)."""
    segments = segments_of(result, duration)
    return {
        "task": "transcribe",
        "language": language or "",
        "duration": duration if duration is not None else (segments[-1].end if segments else 0.0),
        "text": result.text,
        "segments": [{"id": index, "start": s.start, "end": s.end, "text": s.text} for index, s in enumerate(segments)],
    }


def plain_body(fmt: str, result: TranscriptionResult, duration: float | None) -> str:
    """The text, srt or vtt body."""
    if fmt == "text":
        return result.text + "\n"
    segments = segments_of(result, duration)
    return srt(segments) if fmt == "srt" else vtt(segments)
