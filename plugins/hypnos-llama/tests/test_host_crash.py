"""kill -9 of a llama.cpp engine host under the real server while 4 streams run on it and other models serve: the
4 streams end with the spec's error chunk, the embeddings, speech and another chat model answer every request, and
the next chat reloads the model. The embeddings and speech models are the installed plugins' starters (this session
installs hypnos-audio beside llama: noxfile.py BESIDE), each in its own engine host."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypnos.testing.hosts import kill_host, status_entry
from hypnos_server.plugin_loading import installed_plugin_manager
from hypnos_server.starter import render_config, starter_models
from hypnos_server.testing import live_server

pytestmark = pytest.mark.model

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


EMBEDDINGS, SPEECH = "embeddings", "text_to_speech"


def starter_beside(tables: list[dict[str, Any]], modality: str) -> dict[str, Any]:
    """The first installed starter model serving `modality`, in a host of its own."""
    serving = [table for table in tables if table["modality"] == modality]
    assert serving, f"no installed plugin has a starter {modality} model (the llama session installs hypnos-audio)"
    return {**serving[0], "isolation": "process", "initial_tier": "tier1_gpu_vram"}


@pytest.fixture(scope="module")
def server(tiny_gguf: Path, qwen_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real server: the tiny GGUF as `tiny` (4 slots) and again as `other`, the starter embeddings and speech
    models (placed in the shared starter folder), each in its own host process."""
    config = tmp_path_factory.mktemp("host-crash") / "hypnos.toml"
    shutil.copy(tiny_gguf, qwen_models_dir / "host-crash-tiny.gguf")
    starters = starter_models(installed_plugin_manager(), qwen_models_dir)
    models = [
        model("tiny", "host-crash-tiny.gguf", STREAMS),
        model("other", "host-crash-tiny.gguf", 1),
        {**starter_beside(starters, EMBEDDINGS), "id": EMBEDDINGS},
        {**starter_beside(starters, SPEECH), "id": SPEECH},
    ]
    config.write_text(render_config(str(qwen_models_dir), models))
    with live_server(config) as base:
        yield base


def ask_another_model(base: str, turn: int) -> httpx.Response:
    """A request for one of the models beside `tiny`, in turn: the other chat, embeddings, speech."""
    if turn % 3 == 0:
        return chat(base, "other")
    if turn % 3 == 1:
        body = {"model": EMBEDDINGS, "input": ["a first text", "and another one"]}
        return httpx.post(f"{base}/v1/embeddings", json=body, timeout=120)
    body = {"model": SPEECH, "input": "Still here.", "voice": "alloy"}
    return httpx.post(f"{base}/v1/audio/speech", json=body, timeout=120)


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
    others: list[tuple[int, int]] = []
    done = threading.Event()

    def keep_asking() -> None:  # the other models, asked all along, in turn
        turn = 0
        while not done.is_set() or turn < 3:
            others.append((turn % 3, ask_another_model(server, turn).status_code))
            turn += 1

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
    assert {kind for kind, _ in others} == {0, 1, 2}  # each of the other models was asked
    assert {status for _, status in others} == {200}, others
