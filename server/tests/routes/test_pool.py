"""POST /v1/models, PUT|DELETE /v1/models/{id}: the startup checks, the overlay, admin keys, drain_secs."""

from __future__ import annotations

import concurrent.futures
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypnos.config import settings_from_mapping
from hypnos.engine import EngineKind
from hypnos.gguf_arch import gguf_architecture, write_tiny_gguf
from hypnos.hookspecs import hookimpl
from hypnos.plugins import make_plugin_manager
from hypnos.testing import fake_plugin
from hypnos.testing.fake_engine import FakeEngine
from hypnos.types import Modality
from hypnos_server.app import create_app
from litestar.testing import TestClient
from server_kit import error_of, wait_ready

ADDED = """
[[models]]
id = "added"
modality = "text_generation"
engine = "fake"
initial_tier = "tier1_gpu_vram"
[models.fake]
tokens = 3
"""


class GgufKindPlugin:
    """A `ggml_llama` engine kind backed by the fake engine, so the GGUF architecture check can be reached."""

    @hookimpl
    def hypnos_engine_kinds(self) -> list[EngineKind]:
        """The stand-in kind."""
        kind = EngineKind("ggml_llama", frozenset(Modality), FakeEngine, architecture_of=gguf_architecture)
        return [kind]


def make_client(tmp_path: Path, server: dict[str, Any] | None = None, models: list[dict[str, Any]] | None = None):  # type: ignore[no-untyped-def]
    """A client over an app whose config file is tmp_path/hypnos.toml (so the overlay goes next to it)."""
    raw: dict[str, Any] = {
        "models_dir": "models",
        "models": models if models is not None else [{"id": "base", "modality": "text_generation", "engine": "fake"}],
    }
    if server:
        raw["server"] = server
    (tmp_path / "models").mkdir(exist_ok=True)
    settings = settings_from_mapping(raw, str(tmp_path / "hypnos.toml"))
    manager = make_plugin_manager(autoload=False, plugins=[fake_plugin, GgufKindPlugin()])
    return TestClient(create_app(settings, manager))


def chat(client: TestClient, model: str) -> Any:  # type: ignore[type-arg]
    return client.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


def overlay_of(tmp_path: Path) -> dict[str, Any]:
    return tomllib.loads((tmp_path / "hypnos.models.toml").read_text())


def test_add_chat_replace_remove_and_the_overlay_brings_the_pool_back(tmp_path: Path) -> None:
    with make_client(tmp_path) as client:
        wait_ready(client)
        added = client.post("/v1/models", json={"config": ADDED})
        assert added.status_code == 201
        body = added.json()
        assert body["model"] == "added" and body["action"] == "added" and body["persisted"] is True
        assert body["placement"]["primary_tier"] == "tier3_nvme_ssd"  # cold whatever its initial_tier
        assert "added" in [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert chat(client, "added").json()["usage"]["completion_tokens"] == 3
        replaced = client.put("/v1/models/added", json={"config": ADDED.replace("tokens = 3", "tokens = 5")})
        assert replaced.status_code == 200 and replaced.json()["action"] == "replaced"
        assert chat(client, "added").json()["usage"]["completion_tokens"] == 5
        base = client.put("/v1/models/base", json={"config": ADDED.replace('id = "added"', 'id = "ignored"')})
        assert base.status_code == 200 and base.json()["model"] == "base"
        removed = client.delete("/v1/models/added")
        assert removed.status_code == 200 and removed.json() == {
            "model": "added",
            "action": "removed",
            "persisted": True,
        }
        assert chat(client, "added").status_code == 404
    overlay = overlay_of(tmp_path)
    assert [m["id"] for m in overlay["models"]] == ["base"] and overlay["removed"] == []
    with make_client(tmp_path) as restarted:
        wait_ready(restarted)
        ids = [m["id"] for m in restarted.get("/v1/models").json()["data"]]
        assert ids == ["base"]
        assert (
            chat(restarted, "base").json()["usage"]["completion_tokens"] == 3
        )  # the replacement, not the 8 of the config
        assert restarted.delete("/v1/models/base").status_code == 200
    assert overlay_of(tmp_path)["removed"] == ["base"]
    with make_client(tmp_path) as again:
        wait_ready(again)
        assert again.get("/v1/models").json()["data"] == []
        assert again.post("/v1/models", json={"config": ADDED.replace('"added"', '"base"')}).status_code == 201
    assert overlay_of(tmp_path)["removed"] == []


def test_the_startup_checks_answer_400_with_the_reasons(tmp_path: Path) -> None:
    with make_client(tmp_path) as client:
        wait_ready(client)
        taken = client.post("/v1/models", json={"config": ADDED.replace('"added"', '"base"')})
        assert taken.status_code == 400 and "taken" in error_of(taken)["message"]
        block = '[[models]]\nid = "x"\nmodality = "text_generation"\nengine = "fake"\nweights_path = "{}"\n'
        absent = client.post("/v1/models", json={"config": block.format("nope.gguf")})
        assert absent.status_code == 400 and "nope.gguf" in error_of(absent)["message"]
        (tmp_path / "outside.gguf").write_bytes(b"x")
        outside = client.post("/v1/models", json={"config": block.format("../outside.gguf")})
        assert outside.status_code == 400 and "outside models_dir" in error_of(outside)["message"]
        invalid = client.post("/v1/models", json={"config": block.format("x").replace("text_generation", "poetry")})
        assert invalid.status_code == 400 and "modality" in error_of(invalid)["message"]
        engine = client.post("/v1/models", json={"config": ADDED.replace('engine = "fake"', 'engine = "warp"')})
        assert engine.status_code == 400 and "`warp` is not installed" in error_of(engine)["message"]
        both = client.post("/v1/models", json={"config": ADDED, "catalog": "qwen2.5:0.5b"})
        assert both.status_code == 400 and error_of(both)["type"] == "invalid_request_error"
        broken = client.post("/v1/models", json={"config": "[[models]\nid="})
        assert broken.status_code == 400 and "TOML" in error_of(broken)["message"]
        two = client.post("/v1/models", json={"config": ADDED + ADDED.replace('"added"', '"b"')})
        assert two.status_code == 400 and "exactly one" in error_of(two)["message"]
        assert client.put("/v1/models/ghost", json={"config": ADDED}).status_code == 404
        assert error_of(client.delete("/v1/models/ghost"))["type"] == "model_not_found"
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["base"]


def test_files_outside_models_dir_need_a_model_root_and_the_refusal_names_it(tmp_path: Path) -> None:
    block = '[[models]]\nid = "{}"\nmodality = "text_generation"\nengine = "fake"\nweights_path = "{}"\n'
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    (mine / "a.gguf").write_bytes(b"x")
    (other / "b.gguf").write_bytes(b"x")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "link-a.gguf").symlink_to(mine / "a.gguf")
    (tmp_path / "models" / "link-b.gguf").symlink_to(other / "b.gguf")
    with make_client(tmp_path, server={"model_roots": ["mine"]}) as client:
        wait_ready(client)
        linked = client.post("/v1/models", json={"config": block.format("la", "link-a.gguf")})
        assert linked.status_code == 201  # a symlink in models_dir into a model root is followed
        direct = client.post("/v1/models", json={"config": block.format("da", str(mine / "a.gguf"))})
        assert direct.status_code == 201  # an absolute path inside a model root
        refused = client.post("/v1/models", json={"config": block.format("lb", "link-b.gguf")})
        message = error_of(refused)["message"]
        assert refused.status_code == 400 and f"it points to {other / 'b.gguf'}" in message
        assert f"add `{other}` to `server.model_roots` in {tmp_path / 'hypnos.toml'}" in message
        assert client.post("/v1/models", json={"config": block.format("db", str(other / "b.gguf"))}).status_code == 400


def test_a_gguf_must_report_a_tested_architecture(tmp_path: Path) -> None:
    with make_client(tmp_path) as client:
        wait_ready(client)
        write_tiny_gguf(tmp_path / "models" / "good.gguf", "qwen2")
        write_tiny_gguf(tmp_path / "models" / "odd.gguf", "mamba9")
        block = '[[models]]\nid = "{}"\nmodality = "text_generation"\nengine = "ggml_llama"\nweights_path = "{}"\n'
        odd = client.post("/v1/models", json={"config": block.format("odd", "odd.gguf")})
        assert odd.status_code == 400 and "`mamba9`" in error_of(odd)["message"]
        assert "qwen2" in error_of(odd)["message"]  # the tested ones are listed
        good = client.post("/v1/models", json={"config": block.format("good", "good.gguf")})
        assert good.status_code == 201


def test_add_from_the_catalog_needs_the_files_then_works(tmp_path: Path) -> None:
    with make_client(tmp_path) as client:
        wait_ready(client)
        before = client.post("/v1/models", json={"catalog": "qwen2.5:0.5b"})
        assert (
            before.status_code == 400 and "download it with `hypnos pull qwen2.5:0.5b`" in error_of(before)["message"]
        )
        write_tiny_gguf(tmp_path / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2")
        unknown = client.post("/v1/models", json={"catalog": "qwen2.5:0.5b:Q9"})
        assert unknown.status_code == 400 and "Q4_K_M" in error_of(unknown)["message"]
        added = client.post("/v1/models", json={"catalog": "qwen2.5:0.5b:Q4_K_M"})
        assert added.status_code == 201 and added.json()["model"] == "qwen2.5:0.5b"
        entry = next(e for e in client.get("/v1/models/catalog").json()["data"] if e["id"] == "qwen2.5:0.5b")
        assert entry["configured"] is True and entry["configured_quant"] == "Q4_K_M"


def test_not_persisted_when_the_overlay_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    # the data folder (the responses store) lies elsewhere, so nothing creates the config's folder
    raw = {"models_dir": str(tmp_path / "models"), "server": {"data_dir": str(tmp_path / "data")}, "models": []}
    settings = settings_from_mapping(raw, str(tmp_path / "gone" / "hypnos.toml"))  # its folder does not exist
    with TestClient(create_app(settings, make_plugin_manager(autoload=False, plugins=[fake_plugin]))) as client:
        wait_ready(client)
        added = client.post("/v1/models", json={"config": ADDED})
        assert added.status_code == 201 and added.json()["persisted"] is False
        assert chat(client, "added").status_code == 200  # live until the next restart


def test_only_admin_keys_change_the_pool(tmp_path: Path) -> None:
    keys = {"api_keys": ["admin-key"], "keys": [{"key": "plain-key"}, {"key": "boss-key", "admin": True}]}
    with make_client(tmp_path, server=keys) as client:
        wait_ready(client)
        plain = client.post("/v1/models", json={"config": ADDED}, headers={"Authorization": "Bearer plain-key"})
        assert plain.status_code == 403 and error_of(plain)["type"] == "permission_denied"
        boss = client.post("/v1/models", json={"config": ADDED}, headers={"Authorization": "Bearer boss-key"})
        assert boss.status_code == 201
        admin = client.delete("/v1/models/added", headers={"Authorization": "Bearer admin-key"})
        assert admin.status_code == 200


def test_not_open_during_staging(tmp_path: Path) -> None:
    slow = [
        {
            "id": "slow",
            "modality": "text_generation",
            "engine": "fake",
            "initial_tier": "tier2_pinned_ram",
            "fake": {"load_ms": 1500.0},
        }
    ]
    with make_client(tmp_path, models=slow) as client:
        refused = client.post("/v1/models", json={"config": ADDED})
        assert refused.status_code == 503 and error_of(refused)["type"] == "model_not_available"
        assert client.get("/v1/models/catalog").status_code == 200  # the catalog is open
        wait_ready(client)
        assert client.post("/v1/models", json={"config": ADDED}).status_code == 201


@pytest.mark.parametrize("drain", [0.2, 30.0])
def test_replace_during_a_stream_drains_or_answers_model_busy(tmp_path: Path, drain: float) -> None:
    slow = [{"id": "m", "modality": "text_generation", "engine": "fake", "fake": {"tokens": 20, "token_ms": 50.0}}]
    with make_client(tmp_path, models=slow) as client, concurrent.futures.ThreadPoolExecutor(2) as pool:
        wait_ready(client)
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        stream = pool.submit(lambda: client.post("/v1/chat/completions", json=body).text)
        while client.get("/v1/models").json()["data"][0]["active_leases"] == 0:
            time.sleep(0.01)
        new = ADDED.replace("tokens = 3", "tokens = 2")
        answer = client.put("/v1/models/m", json={"config": new, "drain_secs": drain})
        streamed = stream.result()
        assert "[DONE]" in streamed and '"finish_reason":"error"' not in streamed  # the stream finished
        usage = chat(client, "m").json()["usage"]["completion_tokens"]
        if drain < 1:
            assert answer.status_code == 429 and error_of(answer)["type"] == "model_busy"
            assert usage > 2  # the old model (20 tokens) still serves
        else:
            assert answer.status_code == 200 and usage == 2


def test_a_bad_engine_option_table_is_a_400_naming_model_table_and_key(tmp_path: Path) -> None:
    with make_client(tmp_path) as client:
        wait_ready(client)
        bad_key = client.post("/v1/models", json={"config": ADDED.replace("tokens = 3", "tokenz = 3")})
        assert bad_key.status_code == 400
        assert all(s in bad_key.json()["error"]["message"] for s in ("`added`", "[models.fake]", "`tokenz`"))
        bad_table = client.post("/v1/models", json={"config": ADDED.replace("[models.fake]", "[models.faek]")})
        assert bad_table.status_code == 400 and "[models.faek]" in bad_table.json()["error"]["message"]
        assert "added" not in [m["id"] for m in client.get("/v1/models").json()["data"]]
