"""Hypnos on a Ray cluster (loopback): a real `hypnos serve` front over a three-node `ray.cluster_utils.Cluster`
whose two worker nodes carry a `fake_gpu` resource (one agent each), fake engines whose tier 1 holds one big model."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import openai
import pytest
from hypnos.config import settings_from_mapping
from hypnos_server.app import create_app
from litestar.testing import TestClient

from .ray_front import SMALLS, chat, kv_park, move, node_kv_parks, nodes_holding

pytestmark = pytest.mark.distributed


def test_the_single_machine_server_never_imports_ray() -> None:
    code = (
        "import sys; from hypnos.config import settings_from_mapping; from hypnos_server.app import create_app; "
        "create_app(settings_from_mapping({'models': []})); print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_status_lists_one_agent_per_gpu_node(front: str) -> None:
    status = httpx.get(f"{front}/v1/memory/status", timeout=30).json()
    nodes = status["nodes"]
    assert len(nodes) == 2
    assert all(node["alive"] for node in nodes)
    pool = {"big-a", "big-b", "cold-big", "huge", "tiny-gguf", *(name for name, _, _ in SMALLS)}
    assert {m["id"] for m in nodes[0]["models"]} == pool
    assert "capabilities" in status and "models" in status  # the spec's own body is still there


def test_requests_land_on_the_node_holding_the_model(front: str) -> None:
    assert chat(front, "big-a").status_code == 200
    holders = nodes_holding(front, "big-a")
    assert len(holders) == 1
    for _ in range(3):
        response = chat(front, "big-a")
        assert response.status_code == 200
        assert response.json()["hypnos_telemetry"]["previous_tier"] == "tier1_gpu_vram"
    assert nodes_holding(front, "big-a") == holders
    listed = httpx.get(f"{front}/v1/models", timeout=30).json()["data"]
    assert next(m for m in listed if m["id"] == "big-a")["current_tier"] == "tier1_gpu_vram"  # the nodes' view
    assert next(m for m in listed if m["id"] == "cold-big")["current_tier"] == "tier3_nvme_ssd"


def test_a_cold_model_loads_on_the_node_with_room(front: str) -> None:
    assert chat(front, "big-a").status_code == 200
    holder_of_a = nodes_holding(front, "big-a")
    response = chat(front, "big-b")
    assert response.status_code == 200
    assert response.json()["hypnos_telemetry"]["evicted_models"] == []
    holder_of_b = nodes_holding(front, "big-b")
    assert len(holder_of_b) == 1 and holder_of_b != holder_of_a
    assert nodes_holding(front, "big-a") == holder_of_a  # nothing was evicted to make room


def test_the_openai_sdk_works_unchanged_against_the_front(front: str) -> None:
    client = openai.OpenAI(base_url=f"{front}/v1", api_key="unused", max_retries=0)
    whole = client.chat.completions.create(model="big-a", messages=[{"role": "user", "content": "hi"}])
    assert whole.choices[0].message.content and whole.choices[0].finish_reason == "stop"
    pieces = client.chat.completions.create(model="big-b", messages=[{"role": "user", "content": "hi"}], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in pieces if chunk.choices)
    assert text == whole.choices[0].message.content  # same prompt, same seed: the same words, streamed


def test_a_tiny_real_gguf_streams_through_a_node(front: str) -> None:
    client = openai.OpenAI(base_url=f"{front}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "tell me about the fox"}]
    whole = client.chat.completions.create(model="tiny-gguf", messages=messages, max_tokens=12, temperature=0)
    assert whole.usage is not None and whole.usage.completion_tokens > 0
    pieces = client.chat.completions.create(
        model="tiny-gguf", messages=messages, max_tokens=12, temperature=0, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in pieces if chunk.choices)
    assert text == whole.choices[0].message.content  # greedy: the same answer, streamed in batches
    assert len(nodes_holding(front, "tiny-gguf")) == 1


def test_rerank_is_served_by_a_node(front: str) -> None:
    body = {"model": "embedder", "query": "red fox", "documents": ["a blue whale", "a red fox"], "top_n": 2}
    response = httpx.post(f"{front}/v1/rerank", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert [result["index"] for result in response.json()["results"]] == [1, 0]
    assert response.json()["results"][0]["relevance_score"] == 1.0
    assert len(nodes_holding(front, "embedder")) == 1


def test_an_unknown_model_is_404_as_on_one_machine(front: str) -> None:
    response = chat(front, "no-such-model")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "model_not_found"


def test_a_model_no_node_has_room_for_is_507_with_the_spec_body(front: str) -> None:
    whole = chat(front, "huge")
    assert whole.status_code == 507
    assert set(whole.json()) == {"error"}
    assert whole.json()["error"]["type"] == "insufficient_vram_or_ram"
    assert "`huge`" in whole.json()["error"]["message"]
    streamed = chat(front, "huge", stream=True)  # refused before the first token: still an HTTP error
    assert streamed.status_code == 507
    assert streamed.json()["error"]["type"] == "insufficient_vram_or_ram"
    assert chat(front, "big-a").status_code == 200  # the node that refused serves the rest as before


def test_kv_parking_changes_apply_on_every_node(front: str) -> None:
    cap = 64 * 1024 * 1024
    try:
        answer = kv_park(front, {"enabled": True, "max_bytes": cap})
        assert (answer["enabled"], answer["max_bytes"]) == (True, cap)
        parks = node_kv_parks(front)
        assert len(parks) == 2 and all((p["enabled"], p["max_bytes"]) == (True, cap) for p in parks)
        client = openai.OpenAI(base_url=f"{front}/v1", api_key="unused", max_retries=0)
        fox = "tell me about the quick brown fox that jumps over the lazy dog, " * 3  # > 64 tokens: a parked block
        messages = [{"role": "user", "content": fox}]
        client.chat.completions.create(model="tiny-gguf", messages=messages, max_tokens=6, temperature=0)
        (holder,) = nodes_holding(front, "tiny-gguf")
        assert move(front, "tiny-gguf", "tier2_pinned_ram").status_code == 200  # leaves tier 1 on its node: parked
        parked = [m for m in kv_park(front)["models"] if m["model"] == "tiny-gguf"]
        assert len(parked) == 1 and parked[0]["node_id"] == holder and parked[0]["tokens"] > 0
    finally:
        assert kv_park(front, {"enabled": False})["enabled"] is False
    assert all(not p["enabled"] and p["models"] == [] for p in node_kv_parks(front))  # off drops every parked state


def test_deadlines_use_the_chosen_nodes_estimate(front: str) -> None:
    assert chat(front, "big-a").status_code == 200
    headers = {"x-hypnos-deadline-ms": "1"}
    resident = httpx.post(
        f"{front}/v1/chat/completions",
        json={"model": "big-a", "messages": [{"role": "user", "content": "hi"}]},
        headers=headers,
        timeout=60,
    )
    assert resident.status_code == 200  # routed to its node, where nothing has to load
    assert resident.headers["x-hypnos-estimated-wait-ms"] == "0"
    cold = httpx.post(
        f"{front}/v1/chat/completions",
        json={"model": "cold-big", "messages": [{"role": "user", "content": "hi"}]},
        headers=headers,
        timeout=60,
    )
    assert cold.status_code == 503
    assert cold.json()["error"]["type"] == "deadline_unmeetable"
    assert "retry-after" in cold.headers


def test_pool_changes_apply_on_every_node(front: str) -> None:
    block = '[[models]]\nid = "added-chat"\nmodality = "text_generation"\nengine = "fake"\n'
    added = httpx.post(f"{front}/v1/models", json={"config": block}, timeout=60)
    assert added.status_code == 201
    status = httpx.get(f"{front}/v1/memory/status", timeout=30).json()
    assert all(any(m["id"] == "added-chat" for m in node["models"]) for node in status["nodes"])
    assert chat(front, "added-chat").status_code == 200
    shorter = block + "[models.fake]\ntokens = 3\n"
    replaced = httpx.put(f"{front}/v1/models/added-chat", json={"config": shorter}, timeout=60)
    assert replaced.status_code == 200 and replaced.json()["action"] == "replaced"
    assert chat(front, "added-chat").json()["usage"]["completion_tokens"] == 3  # the node serves the new block
    removed = httpx.delete(f"{front}/v1/models/added-chat", timeout=60)
    assert removed.status_code == 200
    status = httpx.get(f"{front}/v1/memory/status", timeout=30).json()
    assert not any(m["id"] == "added-chat" for node in status["nodes"] for m in node["models"])
    gone = chat(front, "added-chat")
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "model_not_found"


def test_moving_a_model_by_hand_uses_one_node_up_and_every_node_down(front: str) -> None:
    up = move(front, "slow-chat", "tier1_gpu_vram")
    assert up.status_code == 200
    assert up.json()["placement"]["primary_tier"] == "tier1_gpu_vram"
    assert len(nodes_holding(front, "slow-chat")) == 1
    down = move(front, "slow-chat", "tier3_nvme_ssd")
    assert down.status_code == 200
    assert nodes_holding(front, "slow-chat") == []


def test_disabling_a_model_applies_on_every_node(front: str) -> None:
    assert httpx.post(f"{front}/v1/models/big-b/disable", timeout=60).status_code == 200
    try:
        status = httpx.get(f"{front}/v1/memory/status", timeout=30).json()
        states = [m for node in status["nodes"] for m in node["models"] if m["id"] == "big-b"]
        assert len(states) == 2 and not any(m["enabled"] for m in states)
        assert chat(front, "big-b").json()["error"]["type"] == "model_disabled"
    finally:
        assert httpx.post(f"{front}/v1/models/big-b/enable", timeout=60).status_code == 200
    assert chat(front, "big-b").status_code == 200


def test_metrics_label_models_by_node(front: str) -> None:
    assert chat(front, "big-a").status_code == 200
    (holder,) = nodes_holding(front, "big-a")
    text = httpx.get(f"{front}/metrics", timeout=30).text
    assert f'hypnos_node_model_tier{{model="big-a",node="{holder}"}} 1.0' in text
    assert text.count("hypnos_node_up{") == 2


def test_inference_latency_covers_the_engines_time_to_its_first_token(front: str) -> None:
    for stream in (False, True):  # the node starts the chat with the lease: its first token's time still counts
        response = chat(front, "slow-chat", max_tokens=3, stream=stream)
        assert response.status_code == 200
        if stream:
            events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
            telemetry = events[-1]["hypnos_telemetry"]
        else:
            telemetry = response.json()["hypnos_telemetry"]
        assert telemetry["inference_latency_ms"] >= telemetry["engine"]["decode_ms"] > 0


def test_a_busy_model_is_429_from_its_node(front: str) -> None:
    body = {"model": "slow-chat", "stream": True, "max_tokens": 10, "messages": [{"role": "user", "content": "go"}]}
    with httpx.stream("POST", f"{front}/v1/chat/completions", json=body, timeout=60) as running:
        assert running.status_code == 200
        lines = running.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        busy = chat(front, "slow-chat")  # its node holds it, its one slot is taken and no queue is allowed
        assert busy.status_code == 429
        assert busy.json()["error"]["type"] == "model_busy"
        assert "retry-after" not in busy.headers
        assert [line for line in lines if line][-1] == "data: [DONE]"


def test_a_speech_stream_through_the_front_is_the_audio_of_one_machine(front: str) -> None:
    body = {"model": "voice", "input": "Hello there. Second phrase!", "voice": "alloy", "stream": True}
    with httpx.stream("POST", f"{front}/v1/audio/speech", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "audio/wav"
        clustered = response.read()
    settings = settings_from_mapping({"models": [{"id": "voice", "modality": "text_to_speech", "engine": "fake"}]})
    with TestClient(create_app(settings)) as single:
        for _ in range(200):
            if single.get("/ready").status_code == 200:
                break
            time.sleep(0.05)
        alone = single.post("/v1/audio/speech", json=body)
        whole = httpx.post(f"{front}/v1/audio/speech", json={**body, "stream": False, "response_format": "pcm"})
    assert alone.status_code == whole.status_code == 200
    assert len(clustered) > 44
    assert clustered == alone.content
    assert whole.content == clustered[44:]  # the whole answer too: the same samples without the WAV header


def test_an_engines_capabilities_answer_through_the_front(front: str) -> None:
    body = {"model": "embedder", "input": "hello", "dimensions": 4}  # the fake embedder has no shorter vectors
    refused = httpx.post(f"{front}/v1/embeddings", json=body, timeout=60)
    assert refused.status_code == 400
    assert "shorter vectors" in refused.json()["error"]["message"]
    whole = httpx.post(f"{front}/v1/embeddings", json={**body, "dimensions": None}, timeout=60)
    assert whole.status_code == 200
    assert len(whole.json()["data"][0]["embedding"]) == 16
