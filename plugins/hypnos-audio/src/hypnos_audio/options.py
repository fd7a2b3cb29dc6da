"""The engines' `[models.kokoro]`, `[models.whisper]` and `[models.piper]` tables, decoded by core at config load."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

MiB = 1024 * 1024
Noise = Annotated[float, msgspec.Meta(ge=0.0)]


class KokoroOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.kokoro]` table."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = 0
    espeak_language: str = "en-us"
    phrase_pause_ms: int = 180
    chunk_max_chars: int = 400
    min_speed: float = 0.5
    max_speed: float = 2.0
    warmup: bool = True
    # ONNX Runtime's arena grew by ~390 MiB synthesizing a 300-character chunk (int8 export, CPU)
    workspace_bytes: int = 384 * MiB


class WhisperOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.whisper]` table."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    compute_type: str = "default"
    cpu_threads: int = 0
    beam_size: int = 5
    vad_filter: bool = False
    condition_on_previous_text: bool = True
    workspace_bytes: int = 128 * MiB
    # the longest audio a request may decode to (checked from the header before decoding)
    max_audio_secs: float = 3600.0


class PiperOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.piper]` table."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = 0
    phrase_pause_ms: int = 180
    min_speed: float = 0.5
    max_speed: float = 2.0
    workspace_bytes: int = 128 * MiB
    # VITS sampling noise (the voice's JSON `inference` values when unset): 0 and 0 make a text's speech the same
    # samples every time, as a reproducible voice prompt or a test needs; the voice's own values sound livelier
    noise_scale: Noise | None = None
    noise_w_scale: Noise | None = None
