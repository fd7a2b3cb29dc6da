"""The `audio` entry point: engine kinds and starter models; cheap to import (engine libraries load lazily)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from hypnos.config import ModelConfig
from hypnos.engine import Engine, EngineContext, EngineKind, missing_library
from hypnos.hookspecs import hookimpl
from hypnos.types import Modality

from hypnos_audio.options import KokoroOptions, PiperOptions, WhisperOptions

KOKORO_KIND = "kokoro_onnx"
# The spec's generic name for ONNX Runtime engines; configs written against the spec use it for Kokoro.
ONNX_RUNTIME_KIND = "onnx_runtime"
WHISPER_KIND = "faster_whisper"
PIPER_KIND = "piper"
SILERO_DETECTOR = "silero"


def make_kokoro_engine(model: ModelConfig, context: EngineContext) -> Engine:
    """A Kokoro engine (checks that exactly one ONNX Runtime build and the phonemizer are installed)."""
    from hypnos_audio.onnx_session import installed_distribution

    installed_distribution()
    if importlib.util.find_spec("phonemizer") is None or importlib.util.find_spec("espeakng_loader") is None:
        raise missing_library("phonemizer and espeakng-loader", "hypnos-audio[cpu]")
    from hypnos_audio.kokoro import KokoroEngine

    return KokoroEngine(model, context)


def make_whisper_engine(model: ModelConfig, context: EngineContext) -> Engine:
    """A faster-whisper engine (checks that faster-whisper is installed)."""
    if importlib.util.find_spec("faster_whisper") is None:
        raise missing_library("faster-whisper", "hypnos-audio[whisper]")
    from hypnos_audio.whisper import WhisperEngine

    return WhisperEngine(model, context)


def make_piper_engine(model: ModelConfig, context: EngineContext) -> Engine:
    """A Piper engine (checks that ONNX Runtime and piper-tts are installed)."""
    from hypnos_audio.onnx_session import installed_distribution

    installed_distribution()
    if importlib.util.find_spec("piper") is None:
        raise missing_library("piper-tts", "hypnos-audio[piper]")
    from hypnos_audio.piper import PiperEngine

    return PiperEngine(model, context)


@hookimpl
def hypnos_engine_kinds() -> list[EngineKind]:
    """Kokoro on ONNX Runtime (also under the spec's name `onnx_runtime`), Piper voices, whisper on faster-whisper."""
    speech_out = frozenset({Modality.TEXT_TO_SPEECH})
    kokoro = {"kokoro": KokoroOptions}
    # the wire reports the API's kinds: ONNX speech is onnx_runtime, whisper (on CTranslate2 here) ggml_whisper
    return [
        EngineKind(KOKORO_KIND, speech_out, make_kokoro_engine, options=kokoro, spec_kind=ONNX_RUNTIME_KIND,
                   description="Kokoro-82M text to speech on ONNX Runtime (onnxruntime or onnxruntime-gpu)"),
        EngineKind(ONNX_RUNTIME_KIND, speech_out, make_kokoro_engine, options=kokoro, backend=KOKORO_KIND,
                   description="alias of kokoro_onnx under the spec's engine kind name"),
        EngineKind(PIPER_KIND, speech_out, make_piper_engine, options={"piper": PiperOptions},
                   spec_kind=ONNX_RUNTIME_KIND,
                   description="a Piper voice (VITS ONNX + JSON config) text to speech on ONNX Runtime"),
        EngineKind(WHISPER_KIND, frozenset({Modality.SPEECH_TO_TEXT}), make_whisper_engine,
                   options={"whisper": WhisperOptions}, spec_kind="ggml_whisper",
                   description="whisper speech to text on faster-whisper (CTranslate2)"),
    ]  # fmt: skip


@hookimpl
def hypnos_speech_detectors() -> list[Any]:
    """Silero VAD for the realtime server VAD, when faster-whisper (which ships the model file) and ONNX Runtime are
    installed: one shared ONNX Runtime session, a detector with its own state per session."""
    if importlib.util.find_spec("onnxruntime") is None:
        return []
    from hypnos_audio.silero import SileroDetectors, silero_asset

    path = silero_asset()
    if path is None:
        return []
    from hypnos_server.plugin_api import SpeechDetectorKind

    description = "Silero VAD v6 (faster-whisper's ONNX file) on ONNX Runtime, 16 kHz 32 ms windows"
    return [SpeechDetectorKind(SILERO_DETECTOR, SileroDetectors(path), description, blocking=True)]


@hookimpl
def hypnos_starter_models(models_dir: Path) -> list[dict[str, Any]]:
    """Kokoro-82M, the Piper voice joe and whisper tiny.en, when their weight packages are installed."""
    from hypnos_audio.starter import starter_models

    return starter_models(Path(models_dir))
