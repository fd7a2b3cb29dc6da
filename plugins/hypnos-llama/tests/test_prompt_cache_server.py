"""The prompt cache through the real server (engine host, ask channel): a conversation whose only slot went to
another prompt comes back as cached tokens on chat, Responses and Messages, /v1/memory/status shows the states, a
restart finds them on disk, and DELETE of the model drops them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from hypnos_llama.testing import toml_model_config, write_tiny_llama
from hypnos_server.testing import live_server

ENV = {"HYPNOS_PLUGINS": "llama"}
MODEL = "tiny"
HISTORY = "the first conversation, long enough to be worth saving: " + "a tower and a river. " * 30
OTHER = "another conversation entirely, which takes the only slot: " + "red green blue. " * 30


def config(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    write_tiny_llama(models / "tiny.gguf")
    model = {"id": MODEL, "modality": "text_generation", "engine": "ggml_llama", "weights_path": "tiny.gguf"}
    model.update(slots=1, context_len=2048, prompt_cache={"min_tokens": 256})  # one slot: another prompt takes it
    path = tmp_path / "hypnos.toml"
    path.write_text(toml_model_config(models, [model]))
    return path


def post(base: str, route: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{base}{route}", json={"model": MODEL, "max_tokens": 4, "temperature": 0, **body}, timeout=120
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def chat(base: str, text: str) -> dict[str, Any]:
    return post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": text}]})


def status(base: str) -> dict[str, Any]:
    return httpx.get(f"{base}/v1/memory/status", timeout=10).json()  # type: ignore[no-any-return]


def test_saved_prompts_come_back_on_every_api_and_after_a_restart(tmp_path: Path) -> None:
    path = config(tmp_path)
    with live_server(path, env=ENV) as base:
        first = chat(base, HISTORY)
        assert "prompt_tokens_details" not in first["usage"]  # nothing cached yet
        chat(base, OTHER)  # takes the only slot
        again = chat(base, HISTORY)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] - 1
        chat(base, OTHER)
        responses = post(base, "/v1/responses", {"input": HISTORY, "max_output_tokens": 4})
        assert responses["usage"]["input_tokens_details"]["cached_tokens"] > 200
        chat(base, OTHER)
        messages = post(base, "/v1/messages", {"messages": [{"role": "user", "content": HISTORY}]})
        assert messages["usage"]["cache_read_input_tokens"] > 200
        cache = status(base)["prompt_cache"]
        assert cache["hits"]["ram"] >= 3 and cache["ram_bytes"] > 0
        (model,) = cache["models"]
        assert model["model"] == MODEL and model["entries"] >= 2
        assert status(base)["tier2_pinned_ram_used_bytes"] >= cache["ram_bytes"]
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert 'hypnos_prompt_cache_hits_total{tier="ram"}' in metrics
    with live_server(path, env=ENV) as base:
        restarted = status(base)["prompt_cache"]
        assert restarted["ram_bytes"] == 0 and restarted["disk_bytes"] > 0
        after = chat(base, HISTORY)
        assert after["usage"]["prompt_tokens_details"]["cached_tokens"] > 200
        assert status(base)["prompt_cache"]["hits"]["disk"] == 1
        deleted = httpx.delete(f"{base}/v1/models/{MODEL}", timeout=60)
        assert deleted.status_code == 200, deleted.text
        assert status(base)["prompt_cache"]["models"] == []
    assert list((tmp_path / "data" / "prompt-cache").glob("*/*.hpc")) == []
