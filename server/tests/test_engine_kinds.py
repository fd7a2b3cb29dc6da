"""Every `engine` on the wire is one of the API's closed EngineKind values; the concrete engine is in `backend`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.engine import EngineKind
from hypnos.hookspecs import hookimpl
from hypnos.testing import fake_engine
from hypnos.types import Modality
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

# The appendix's EngineKind list, copied from the API reference (not from the code under test).
APPENDIX_ENGINE_KINDS = {"ggml_llama", "ggml_whisper", "ggml_diffusion", "onnx_runtime", "docling", "gliner"}


class PiperLikePlugin:
    """A plugin whose kind has its own name and declares the API's kind, as hypnos-audio's piper does."""

    @hookimpl
    def hypnos_engine_kinds(self) -> list[EngineKind]:
        """The `voicebox` kind, reported as onnx_runtime."""
        speech = frozenset({Modality.TEXT_TO_SPEECH})
        return [EngineKind("voicebox", speech, fake_engine.FakeEngine, spec_kind="onnx_runtime")]


MODELS = [
    {"id": "chat", "modality": "text_generation", "engine": "fake"},
    {"id": "ears", "modality": "speech_to_text", "engine": "fake"},
    {"id": "painter", "modality": "image_generation", "engine": "fake"},
    {"id": "voice", "modality": "text_to_speech", "engine": "voicebox"},
    # kinds no plugin installed here provides: reported as the API's kind of their modality
    {"id": "piper-voice", "modality": "text_to_speech", "engine": "piper"},
    {"id": "whisper", "modality": "speech_to_text", "engine": "faster_whisper"},
    {"id": "sd", "modality": "image_generation", "engine": "diffusers"},
    {"id": "llama", "modality": "text_generation", "engine": "ggml_llama"},
]


def client() -> TestClient[Any]:
    return TestClient(build_app(config(models=MODELS), plugins=[PiperLikePlugin()]))


def engines(entries: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {entry["id"]: (entry["engine"], entry["backend"]) for entry in entries}


EXPECTED = {
    "chat": ("ggml_llama", "fake"),
    "ears": ("ggml_whisper", "fake"),
    "painter": ("ggml_diffusion", "fake"),
    "voice": ("onnx_runtime", "voicebox"),
    "piper-voice": ("onnx_runtime", "piper"),
    "whisper": ("ggml_whisper", "faster_whisper"),
    "sd": ("ggml_diffusion", "diffusers"),
    "llama": ("ggml_llama", "ggml_llama"),
}


def test_memory_status_and_models_report_the_appendix_kind_and_the_backend() -> None:
    with client() as test_client:
        wait_ready(test_client)
        status = engines(test_client.get("/v1/memory/status").json()["models"])
        listed = engines(test_client.get("/v1/models").json()["data"])
        one = test_client.get("/v1/models/voice").json()
    assert status == EXPECTED
    assert listed == EXPECTED
    assert (one["engine"], one["backend"]) == ("onnx_runtime", "voicebox")
    assert {engine for engine, _ in [*status.values(), *listed.values()]} <= APPENDIX_ENGINE_KINDS


def test_every_catalog_entry_reports_an_appendix_kind_and_keeps_its_config_engine_as_backend(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    raw = config(models=[])
    raw["models_dir"] = str(tmp_path / "models")
    with TestClient(build_app(raw)) as test_client:
        data = test_client.get("/v1/models/catalog").json()["data"]
    assert data
    for entry in data:
        assert entry["engine"] in APPENDIX_ENGINE_KINDS, entry["id"]
    by_id = {entry["id"]: entry for entry in data}
    # the shipped catalog's speech entries: ONNX speech and whisper, engines of plugins not installed in this venv
    assert (by_id["kokoro-82m"]["engine"], by_id["kokoro-82m"]["backend"]) == ("onnx_runtime", "kokoro_onnx")
    assert (by_id["whisper-tiny.en"]["engine"], by_id["whisper-tiny.en"]["backend"]) == (
        "ggml_whisper",
        "faster_whisper",
    )
    # the config block keeps the engine name a config needs
    assert 'engine = "kokoro_onnx"' in by_id["kokoro-82m"]["variants"][0]["config_block"]


class EspeakLikePlugin:
    """A third party's speech kind on a program from apt: reported as onnx_runtime, its own kind in engine_plugin."""

    @hookimpl
    def hypnos_engine_kinds(self) -> list[EngineKind]:
        """The `espeaky` kind, backend espeak-ng."""
        speech = frozenset({Modality.TEXT_TO_SPEECH})
        kind = EngineKind("espeaky", speech, fake_engine.FakeEngine, spec_kind="onnx_runtime", backend="espeak-ng")
        return [kind]


def test_the_plugins_own_kind_is_reported_as_engine_plugin() -> None:
    models = [{"id": "voice", "modality": "text_to_speech", "engine": "espeaky"}]
    with TestClient(build_app(config(models=models), plugins=[EspeakLikePlugin()])) as test_client:
        wait_ready(test_client)
        listed = test_client.get("/v1/models/voice").json()
        status = test_client.get("/v1/memory/status").json()["models"][0]
    for entry in (listed, status):
        assert (entry["engine"], entry["backend"], entry["engine_plugin"]) == ("onnx_runtime", "espeak-ng", "espeaky")
