"""The model pool of the real server with llama.cpp: a tiny GGUF added by config, chatted with, replaced during a
stream, removed, and brought back by the overlay after a restart."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
from hypnos_llama.testing import write_tiny_llama
from hypnos_server.testing import live_server

ENV = {"HYPNOS_PLUGINS": "llama"}
MESSAGES = [{"role": "user", "content": "the capital of France"}]


def block(model_id: str, weights: str, slots: int) -> str:
    return (
        f'[[models]]\nid = "{model_id}"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
        f'weights_path = "{weights}"\nslots = {slots}\ncontext_len = 512\n'
    )


def chat(base: str, model: str, **extra: Any) -> dict[str, Any]:
    body = {"model": model, "messages": MESSAGES, "max_tokens": 8, "temperature": 0, **extra}
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_add_replace_during_a_stream_remove_and_restart(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_llama(models / "tiny-a.gguf", seed=1)
    write_tiny_llama(models / "tiny-b.gguf", seed=2, layers=3)
    config = tmp_path / "hypnos.toml"
    config.write_text(f'models_dir = "{models}"\n')
    with live_server(config, env=ENV) as base:
        added = httpx.post(f"{base}/v1/models", json={"config": block("tiny", "tiny-a.gguf", 1)}, timeout=60)
        assert added.status_code == 201, added.text
        assert added.json()["placement"]["primary_tier"] == "tier3_nvme_ssd"
        assert chat(base, "tiny")["usage"]["completion_tokens"] > 0
        replaced: dict[str, httpx.Response] = {}
        body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 64, "temperature": 0, "stream": True}
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as stream:
            lines = stream.iter_lines()
            first = next(lines)  # the stream runs on the old model
            change = threading.Thread(
                target=lambda: replaced.update(
                    answer=httpx.put(
                        f"{base}/v1/models/tiny", json={"config": block("x", "tiny-b.gguf", 2)}, timeout=120
                    )
                )
            )
            change.start()
            rest = [line for line in lines if line]
        change.join(120)
        assert first.startswith("data: ") and rest[-1] == "data: [DONE]"
        assert '"finish_reason":"error"' not in "".join(rest)  # the stream finished on the old model
        assert replaced["answer"].status_code == 200, replaced["answer"].text
        status = httpx.get(f"{base}/v1/memory/status", timeout=10).json()
        tiny = next(m for m in status["models"] if m["id"] == "tiny")
        assert tiny["current_tier"] == "tier3_nvme_ssd"  # the replacement starts cold
        assert chat(base, "tiny")["usage"]["completion_tokens"] > 0  # served by the new model
        status = httpx.get(f"{base}/v1/memory/status", timeout=10).json()
        tiny = next(m for m in status["models"] if m["id"] == "tiny")
        assert tiny["placement"]["gpu_layers"] + tiny["placement"]["pinned_ram_layers"] == 3  # tiny-b's layers
        wrong = httpx.post(f"{base}/v1/models", json={"config": block("other", "missing.gguf", 1)}, timeout=60)
        assert wrong.status_code == 400 and "missing.gguf" in wrong.json()["error"]["message"]
        assert httpx.delete(f"{base}/v1/models/tiny", timeout=60).status_code == 200
        gone = httpx.post(f"{base}/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES}, timeout=30)
        assert gone.status_code == 404
        again = httpx.post(f"{base}/v1/models", json={"config": block("tiny", "tiny-b.gguf", 2)}, timeout=60)
        assert again.status_code == 201
    with live_server(config, env=ENV) as base:
        ids = [m["id"] for m in httpx.get(f"{base}/v1/models", timeout=10).json()["data"]]
        assert ids == ["tiny"]
        assert chat(base, "tiny")["usage"]["completion_tokens"] > 0
