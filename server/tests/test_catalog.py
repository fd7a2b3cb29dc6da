"""GET /v1/models/catalog: the shipped catalog plus plugin entries, what is in models_dir, config blocks."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from hypnos.config import settings_from_mapping
from hypnos.engine import EngineKind
from hypnos.gguf_arch import gguf_architecture, write_tiny_gguf
from hypnos.hookspecs import hookimpl
from hypnos.overlay import validate_model_block
from hypnos.plugins import make_plugin_manager
from hypnos.testing import fake_plugin
from hypnos.testing.fake_engine import FakeEngine
from hypnos.types import Modality
from hypnos_server.app import create_app
from litestar.testing import TestClient
from server_kit import error_of

STARTERS = {"qwen2.5:0.5b", "all-minilm-l6-v2", "kokoro-82m", "whisper-tiny.en"}
REPO_ENGINE_KINDS = {"ggml_llama", "kokoro_onnx", "faster_whisper"}  # the kinds of the plugins in this repository


class CatalogPlugin:
    """A plugin bringing one good and one broken catalog entry."""

    @hookimpl
    def hypnos_catalog_entries(self) -> list[dict[str, Any]]:
        """Its entries."""
        good = {
            "id": "fake-tts", "name": "Fake TTS", "engine": "fake", "modality": "text_to_speech",
            "variants": [{"quant": "fp32", "default": True, "files": [
                {"role": "weights", "repo": "acme/fake", "remote": "f.bin", "local": "fake/f.bin", "size": 4}]}],
        }  # fmt: skip
        return [good, {"id": "broken", "variants": "nope"}]


class GgufReaderPlugin:
    """A `ggml_llama` kind backed by the fake engine that reads a GGUF's architecture, as the llama plugin's does."""

    @hookimpl
    def hypnos_engine_kinds(self) -> list[EngineKind]:
        """The stand-in kind."""
        return [EngineKind("ggml_llama", frozenset(Modality), FakeEngine, architecture_of=gguf_architecture)]


def client_for(
    tmp_path: Path,
    models: list[dict[str, Any]] | None = None,
    catalog: Path | None = None,
    plugins: tuple[object, ...] = (),
) -> TestClient:  # type: ignore[type-arg]
    (tmp_path / "models").mkdir(exist_ok=True)
    raw = {"models_dir": str(tmp_path / "models"), "models": models or []}
    manager = make_plugin_manager(autoload=False, plugins=[fake_plugin, CatalogPlugin(), *plugins])
    return TestClient(create_app(settings_from_mapping(raw), manager, catalog_path=catalog))


def entries(client: TestClient, query: str = "") -> dict[str, dict[str, Any]]:  # type: ignore[type-arg]
    body = client.get(f"/v1/models/catalog{query}").json()
    return {e["id"]: e for e in body["data"]}


def test_the_catalog_lists_the_starters_each_engine_kind_and_plugin_entries(tmp_path: Path) -> None:
    with client_for(tmp_path) as client:
        body = client.get("/v1/models/catalog").json()
        assert body["object"] == "list" and body["catalog_version"] == 1
        assert body["models_dir"] == str(tmp_path / "models")
        listed = {e["id"]: e for e in body["data"]}
        assert STARTERS <= set(listed) and "fake-tts" in listed and "broken" not in listed
        assert REPO_ENGINE_KINDS <= {e["backend"] for e in listed.values()}
        assert {"qwen2", "lfm3", "bert", "llama"} <= set(body["tested_architectures"])
        for entry in listed.values():
            assert entry["configured"] is False and entry["enabled"] is False
            if entry["engine"] == "ggml_llama":
                assert entry["architecture"] in body["tested_architectures"]
            for variant in entry["variants"]:
                block = tomllib.loads(variant["config_block"])["models"][0]
                assert validate_model_block(block, "catalog").id == entry["id"]  # every block passes the checks
                assert variant["installed"] is False and variant["outdated"] is False


def test_modality_filter_keeps_primary_and_additional(tmp_path: Path) -> None:
    with client_for(tmp_path) as client:
        assert set(entries(client, "?modality=vision")) == {"lfm3-vl:2b"}
        text = entries(client, "?modality=text_generation")
        assert "lfm3-vl:2b" in text and "qwen2.5:0.5b" in text and "kokoro-82m" not in text


def test_present_outdated_installed_and_problem_come_from_models_dir(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    weights = write_tiny_gguf(models / "LFM3-VL-2B-Q8_0.gguf", "lfm3")
    os.truncate(weights, 1846238496)  # sparse: the listed size without the bytes
    with client_for(tmp_path, models=[], plugins=(GgufReaderPlugin(),)) as client:
        variant = entries(client)["lfm3-vl:2b"]["variants"][0]
        files = {f["role"]: f for f in variant["files"]}
        assert files["weights"]["present"] is True and files["weights"]["outdated"] is False
        assert files["aux"]["present"] is False and variant["installed"] is False and "problem" not in variant
        (models / "mmproj-LFM3-VL-2B-Q8_0.gguf").write_bytes(b"short")
        variant = entries(client)["lfm3-vl:2b"]["variants"][0]
        assert variant["installed"] is True and variant["outdated"] is True
        assert {f["role"]: f for f in variant["files"]}["aux"]["outdated"] is True
        write_tiny_gguf(models / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "llama")
        qwen = entries(client)["qwen2.5:0.5b"]["variants"][0]
        assert "`llama`" in qwen["problem"] and "`qwen2`" in qwen["problem"]


def test_configured_models_are_marked(tmp_path: Path) -> None:
    configured = [
        {"id": "fake-tts", "modality": "text_to_speech", "engine": "fake", "weights_path": "fake/f.bin",
         "enabled": False},
    ]  # fmt: skip
    with client_for(tmp_path, models=configured) as client:
        entry = entries(client)["fake-tts"]
        assert entry["configured"] is True and entry["enabled"] is False and entry["configured_quant"] == "fp32"


def test_no_catalog_file_is_404(tmp_path: Path) -> None:
    with client_for(tmp_path, catalog=tmp_path / "none.toml") as client:
        response = client.get("/v1/models/catalog")
        assert response.status_code == 404 and error_of(response)["type"] == "not_found"
