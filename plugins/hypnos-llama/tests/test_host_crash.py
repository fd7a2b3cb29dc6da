"""kill -9 of a llama.cpp engine host under the real server while 4 streams run on it and another model serves: the
4 streams end with the spec's error chunk, the other model answers every request, the next chat reloads the model."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypnos.testing.hosts import kill_host, status_entry
from hypnos_llama.testing import toml_model_config
from hypnos_server.testing import live_server

STREAMS = 4
MESSAGES = [{"role": "user", "content": "the capital of France"}]
LONG = 8000  # tokens a stream asks for: far more than it gets before the kill


def model(model_id: str, weights: str, slots: int) -> dict[str, Any]:
    return {
        "id": model_id,
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": weights,
        "slots": slots,
        "context_len": LONG + 256,
        "isolation": "process",
        "llama": {"n_threads": 1},
    }


@pytest.fixture(scope="module")
def server(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real server: the tiny GGUF as `tiny` (4 slots) and again as `other`, each in its own host process."""
    config = tmp_path_factory.mktemp("host-crash") / "hypnos.toml"
    models = [model("tiny", tiny_gguf.name, STREAMS), model("other", tiny_gguf.name, 1)]
    config.write_text(toml_model_config(tiny_gguf.parent, models))
    with live_server(config, env={"HYPNOS_PLUGINS": "llama"}) as base:
        yield base


def chat(base: str, model_id: str) -> httpx.Response:
    body = {"model": model_id, "messages": MESSAGES, "max_tokens": 8, "temperature": 0}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)


def stream(base: str, started: threading.Event) -> list[Any]:
    """One long chat stream's data payloads (JSON, and the literal [DONE]); `started` is set at its first token."""
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": LONG, "stream": True}
    events: list[Any] = []
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
                if (
                    events[-1] != "[DONE]"
                    and events[-1]["choices"]
                    and events[-1]["choices"][0]["delta"].get("content")
                ):
                    started.set()
    return events


def test_killing_the_host_ends_its_streams_with_the_error_chunk_and_the_next_chat_reloads(server: str) -> None:
    assert chat(server, "tiny").status_code == 200 and chat(server, "other").status_code == 200
    others: list[int] = []
    done = threading.Event()

    def keep_asking() -> None:  # the other model, asked all along
        while not done.is_set():
            others.append(chat(server, "other").status_code)

    asking = threading.Thread(target=keep_asking)
    asking.start()
    starts = [threading.Event() for _ in range(STREAMS)]
    results: dict[int, list[Any]] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, stream(server, starts[i]))) for i in range(STREAMS)
    ]
    for thread in threads:
        thread.start()
    try:
        assert all(start.wait(60) for start in starts), "not every stream got its first token"
        pid = kill_host(server, "tiny")
        for thread in threads:
            thread.join(60)
        assert sorted(results) == list(range(STREAMS))
        for events in results.values():
            assert events[-1] == "[DONE]"
            last = events[-2]
            assert last["choices"][0]["finish_reason"] == "error"
            assert last["error"]["type"] == "server_error" and "SIGKILL" in last["error"]["message"]

        entry = status_entry(server, "tiny")
        assert entry["current_tier"] == "tier3_nvme_ssd" and entry["active_leases"] == 0
        assert "SIGKILL" in entry["unavailable_reason"]
        answer = chat(server, "tiny")  # a new host loads the model
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        entry = status_entry(server, "tiny")
        assert entry["engine_process"]["pid"] != pid and entry["engine_restarts"] == 1
    finally:
        done.set()
        asking.join(120)
    assert others and set(others) == {200}
