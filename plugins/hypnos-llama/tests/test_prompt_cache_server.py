"""The prompt cache through the real server (engine host, ask channel): a conversation whose only slot went to
another prompt comes back as cached tokens on chat, Responses and Messages, /v1/memory/status shows the states, a
restart finds them on disk, DELETE of the model drops them, and with server.prompt_cache_isolation = "key" one API
key's cached prompt is never another key's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from hypnos_llama.testing import toml_model_config, write_tiny_llama
from hypnos_server.testing import live_server

ENV = {"HYPNOS_PLUGINS": "llama"}
MODEL = "tiny"
HISTORY = "the first conversation, long enough to be worth saving: " + "a tower and a river. " * 30
OTHER = "another conversation entirely, which takes the only slot: " + "red green blue. " * 30


KEYS = """[server]
prompt_cache_isolation = "{isolation}"
[[server.keys]]
key = "key-alice"
label = "alice"
[[server.keys]]
key = "key-bob"
label = "bob"
"""


def config(tmp_path: Path, extra: str = "") -> Path:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    write_tiny_llama(models / "tiny.gguf")
    model = {"id": MODEL, "modality": "text_generation", "engine": "ggml_llama", "weights_path": "tiny.gguf"}
    model.update(slots=1, context_len=2048, prompt_cache={"min_tokens": 256})  # one slot: another prompt takes it
    path = tmp_path / "hypnos.toml"
    path.write_text(toml_model_config(models, [model], extra=extra))
    return path


def post(base: str, route: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    response = httpx.post(
        f"{base}{route}",
        json={"model": MODEL, "max_tokens": 4, "temperature": 0, **body},
        headers={"Authorization": f"Bearer {key}"} if key else None,
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def chat(base: str, text: str, key: str | None = None) -> dict[str, Any]:
    return post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}, key)


def cached(answer: dict[str, Any]) -> int:
    """The answer's cached prompt tokens (the details are left out when none were)."""
    return int(answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))


def status(base: str, key: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    response = httpx.get(f"{base}/v1/memory/status", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


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


@pytest.mark.parametrize("isolation", ["key", "model"])
def test_one_keys_cached_prompt_is_never_served_to_another_key_under_key_isolation(
    tmp_path: Path, isolation: str
) -> None:
    with live_server(config(tmp_path, KEYS.format(isolation=isolation)), env=ENV) as base:
        first = chat(base, HISTORY, "key-alice")
        # the same long prompt from bob: alice's cells in the slot and her saved state in the RAM tier
        bob = chat(base, HISTORY, "key-bob")
        if isolation == "key":
            assert cached(bob) == 0
        else:  # a prefix is the same computation whoever sent it
            assert cached(bob) >= first["usage"]["prompt_tokens"] - 1
        chat(base, OTHER, "key-alice")  # takes the only slot: bob's state goes to the store too
        bob_again = chat(base, HISTORY, "key-bob")
        assert cached(bob_again) >= first["usage"]["prompt_tokens"] - 1  # bob's own, from the store
        alice_again = chat(base, HISTORY, "key-alice")  # bob's cells in the slot, alice's state in the store
        assert cached(alice_again) >= first["usage"]["prompt_tokens"] - 1
        hits = status(base, "key-alice")["prompt_cache"]["hits"]
        assert hits["ram"] == (2 if isolation == "key" else 1)
