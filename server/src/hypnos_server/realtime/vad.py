"""Server VAD: 20 ms frames through a speech detector, turned into turn events.

Detectors come as SpeechDetectorKinds: plugins offer model detectors (a neural VAD model, say) through the
`hypnos_speech_detectors` hook, and the built-in `energy` one is the fallback: a plain RMS energy gate in pure Python,
speech when a frame's level is above -60 + 40 * threshold dBFS (threshold 0.5: -40 dBFS). It needs no model and keeps
up with real time on any CPU, but it hears any loud noise as speech.
"""

from __future__ import annotations

import array
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

FRAME_MS = 20
ONSET_FRAMES = 2  # consecutive speech frames that start a turn (a click is not speech)
PAUSE_MS = 100  # silence within a turn after which its transcription starts, before the turn is known to end


class SpeechDetector(Protocol):
    """Says whether one frame of audio holds speech: FRAME_MS of pcm16 mono little-endian at 24 kHz, in order (a
    detector may keep state across the frames of its session)."""

    def is_speech(self, frame: bytes) -> bool:
        """True when the frame is speech."""
        ...


@dataclass(frozen=True)
class SpeechDetectorKind:
    """A speech detector the server VAD can run: `new(threshold)` makes one with its own state for one session (a
    model's weights shared between them); `blocking` ones (a model) are fed off the event loop."""

    name: str
    new: Callable[[float], SpeechDetector]
    description: str = ""
    blocking: bool = True


class EnergyDetector:
    """Speech when the frame's RMS level is above -60 + 40 * threshold dBFS."""

    def __init__(self, threshold: float) -> None:
        self.level = 32768.0 * 10 ** ((-60.0 + 40.0 * threshold) / 20.0)

    def is_speech(self, frame: bytes) -> bool:
        """True when the frame is loud enough."""
        samples = array.array("h")
        samples.frombytes(frame[: len(frame) // 2 * 2])
        if sys.byteorder == "big":
            samples.byteswap()
        if not samples:
            return False
        return math.sqrt(sum(s * s for s in samples) / len(samples)) >= self.level


ENERGY = SpeechDetectorKind(
    "energy", EnergyDetector, "RMS level above -60 + 40 x threshold dBFS (no model; loud noise is speech)", False
)


@dataclass
class VadEvent:
    """A turn boundary, `started` or `stopped`, or within a turn `paused` / `resumed`, at this ms of the session's
    audio."""

    kind: str
    at_ms: int


class TurnSegmenter:
    """Feeds appended audio to a detector in frames; speech start after ONSET_FRAMES speech frames, stop after
    silence_ms of non-speech frames. Within a turn, PAUSE_MS of silence is a `paused` event (the turn may be ending:
    work on it can start) and speech after it a `resumed` one."""

    def __init__(self, detector: SpeechDetector, sample_rate: int, silence_ms: int, blocking: bool = False) -> None:
        self.detector = detector
        self.blocking = blocking  # the detector runs a model: feed() is called off the event loop
        self.frame_bytes = sample_rate * FRAME_MS // 1000 * 2
        self.silence_frames = max(1, silence_ms // FRAME_MS)
        pause = PAUSE_MS // FRAME_MS
        self.pause_frames = pause if pause < self.silence_frames else None  # no pause event when the stop comes first
        self.pending = b""
        self.frames = 0  # frames seen in the session
        self.speaking = False
        self.run = 0  # speech frames in a row (before onset) or silent frames in a row (during speech)

    def end_turn(self) -> int:
        """End the turn in progress now (the buffer is full); the audio time it ends at, in ms."""
        self.speaking, self.run = False, 0
        return self.frames * FRAME_MS

    def feed(self, pcm: bytes) -> list[VadEvent]:
        """The turn events the new audio makes."""
        events: list[VadEvent] = []
        data = self.pending + pcm
        usable = len(data) // self.frame_bytes * self.frame_bytes
        self.pending = data[usable:]
        for offset in range(0, usable, self.frame_bytes):
            speech = self.detector.is_speech(data[offset : offset + self.frame_bytes])
            self.frames += 1
            if not self.speaking:
                self.run = self.run + 1 if speech else 0
                if self.run >= ONSET_FRAMES:
                    self.speaking, self.run = True, 0
                    events.append(VadEvent("started", (self.frames - ONSET_FRAMES) * FRAME_MS))
            else:
                paused = self.pause_frames is not None and self.run >= self.pause_frames
                self.run = 0 if speech else self.run + 1
                if speech and paused:
                    events.append(VadEvent("resumed", self.frames * FRAME_MS))
                elif self.run == self.pause_frames:
                    events.append(VadEvent("paused", self.frames * FRAME_MS))
                if self.run >= self.silence_frames:
                    self.speaking, self.run = False, 0
                    events.append(VadEvent("stopped", self.frames * FRAME_MS))
        return events
