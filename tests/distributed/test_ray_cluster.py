"""Hypnos on a Ray cluster (loopback): a real `hypnos serve` front over a three-node `ray.cluster_utils.Cluster`
whose two worker nodes carry a `fake_gpu` resource (one agent each), fake engines whose tier 1 holds one big model."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import ray
from hypnos.config import settings_from_mapping
from hypnos_llama.testing import write_tiny_llama
from hypnos_server.app import create_app
from hypnos_server.cluster.front import NAMESPACE, agent_name
from hypnos_server.testing import live_server
from litestar.testing import TestClient
from ray.cluster_utils import Cluster

pytestmark = pytest.mark.distributed

GIB = 1024**3
# tier 1 of every node holds one "big" model (672 MiB of weights) but not two
CONFIG = """
models_dir = "{models}"

[hardware]
simulate = true
simulate_vram_bytes = {vram}
max_process_memory_bytes = 8589934592

[limits]
max_queue_per_model = 0

[cluster]
address = "{address}"
gpu_resource = "fake_gpu"
stream_window_ms = 5
watch_secs = 0.5

{big_a}
{big_b}

[[models]]
id = "cold-big"
modality = "text_generation"
engine = "fake"
[models.fake]
layer_bytes = 83886080

[[models]]
id = "huge"
modality = "text_generation"
engine = "fake"
[models.fake]
layers = 2000

[[models]]
id = "tiny-gguf"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "tiny.gguf"
context_len = 512
"""


SMALL = """
[[models]]
id = "{id}"
modality = "{modality}"
engine = "fake"
[models.fake]
layers = 1
layer_bytes = 1048576
non_layer_bytes = 1048576
{fake}
"""
# small fake models: a slow chat, one whose first token takes a minute, one whose load takes 6 s, two other modalities
SMALLS = [
    ("slow-chat", "text_generation", "tokens = 40\ntoken_ms = 100"),
    ("slow-first", "text_generation", "tokens = 4\nfirst_token_ms = 60000"),
    ("slow-load", "text_generation", "tokens = 2\nload_ms = 6000"),
    ("embedder", "embeddings", ""),
    ("voice", "text_to_speech", ""),
]


BIG = """[[models]]
id = "{id}"
modality = "text_generation"
engine = "fake"
[models.fake]
tokens = 6
layer_bytes = 83886080
kv_bytes_per_token = 1024
max_context_len = 4096
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head node without GPUs and two nodes with one `fake_gpu` each, all on loopback."""
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    nodes = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    for _ in range(2):
        nodes.add_node(**small, resources={"fake_gpu": 1})
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, namespace=NAMESPACE, log_to_driver=False)
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


@pytest.fixture(scope="module")
def front(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real front process (granian + the Litestar app) joined to the cluster."""
    folder = tmp_path_factory.mktemp("ray")
    write_tiny_llama(folder / "tiny.gguf", seed=1)
    config = folder / "hypnos.toml"
    config.write_text(
        CONFIG.format(
            vram=GIB, address=cluster.address, models=folder, big_a=BIG.format(id="big-a"), big_b=BIG.format(id="big-b")
        )
        + "".join(SMALL.format(id=name, modality=modality, fake=fake) for name, modality, fake in SMALLS)
    )
    with live_server(config, env={"HYPNOS_PLUGINS": "fake,llama"}, ready_timeout=150) as base:
        yield base


def chat(base: str, model: str, timeout: float = 60, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}], **extra}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=timeout)


def move(base: str, model: str, tier: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/memory/tier", json={"model": model, "target_tier": tier}, timeout=60)


def nodes_holding(base: str, model: str) -> list[str]:
    """The node ids whose tier 1 holds the model, from the front's /v1/memory/status `nodes`."""
    status = httpx.get(f"{base}/v1/memory/status", timeout=30).json()
    return [
        node["node_id"]
        for node in status["nodes"]
        if node["alive"] and any(m["id"] == model and m["current_tier"] == "tier1_gpu_vram" for m in node["models"])
    ]


def leased_on(base: str, model: str) -> list[str]:
    status = httpx.get(f"{base}/v1/memory/status", timeout=30).json()
    return [
        node["node_id"]
        for node in status["nodes"]
        if node["alive"] and any(m["id"] == model and m["active_leases"] > 0 for m in node["models"])
    ]


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


def kv_park(base: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    url = f"{base}/v1/memory/kv-park"
    response = httpx.post(url, json=body, timeout=60) if body else httpx.get(url, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def node_kv_parks(base: str) -> list[dict[str, Any]]:
    status = httpx.get(f"{base}/v1/memory/status", timeout=30).json()
    return [node["kv_park"] for node in status["nodes"] if node["alive"]]


def test_kv_parking_changes_apply_on_every_node(front: str) -> None:
    cap = 64 * 1024 * 1024
    try:
        answer = kv_park(front, {"enabled": True, "max_bytes": cap})
        assert (answer["enabled"], answer["max_bytes"]) == (True, cap)
        parks = node_kv_parks(front)
        assert len(parks) == 2 and all((p["enabled"], p["max_bytes"]) == (True, cap) for p in parks)
        client = openai.OpenAI(base_url=f"{front}/v1", api_key="unused", max_retries=0)
        messages = [{"role": "user", "content": "tell me about the fox"}]
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


def test_a_client_hang_up_cancels_on_the_node(front: str) -> None:
    body = {"model": "slow-chat", "stream": True, "messages": [{"role": "user", "content": "count"}]}
    with httpx.stream("POST", f"{front}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
    record: dict[str, Any] = {}
    for _ in range(200):  # the record is written once the node stopped the engine and the lease went back
        found = httpx.get(f"{front}/v1/logs/{request_id}", timeout=30)
        if found.status_code == 200:
            record = found.json()
            break
        time.sleep(0.05)
    assert record["error"] == "the client went away"
    assert record["tokens_out"] < 40  # the node's engine stopped early instead of making all 40 tokens


def hung_up_records(base: str, model: str, count: int = 1) -> list[dict[str, Any]]:
    """The request log records of the model's requests whose client hung up, once there are `count` (polled: each is
    written once its request is over)."""
    for _ in range(300):
        page = httpx.get(f"{base}/v1/logs", params={"model": model}, timeout=30).json()
        gone = [record for record in page["records"] if record["error"] == "the client went away"]
        if len(gone) >= count:
            return gone
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} records of hung-up requests on {model}")


def wait_unleased(base: str, model: str) -> list[str]:
    """Poll until no node holds a lease of the model; the nodes still holding one."""
    for _ in range(300):
        if not (holding := leased_on(base, model)):
            break
        time.sleep(0.05)
    return holding


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_hung_up_before_its_first_token_stops_on_the_node(front: str, stream: bool) -> None:
    before = len(hung_up_records(front, "slow-first", 0))
    with pytest.raises(httpx.ReadTimeout):  # the client leaves during the 60 s prefill of the first token
        chat(front, "slow-first", timeout=1.5, stream=stream)
    hung_up_records(front, "slow-first", before + 1)
    assert wait_unleased(front, "slow-first") == []  # the node's engine stopped and its lease went back


def test_a_lease_given_up_while_its_model_loads_goes_back_on_the_node(front: str) -> None:
    with pytest.raises(httpx.ReadTimeout):  # the client leaves during the node's 6 s load
        chat(front, "slow-load", timeout=1.5)
    hung_up_records(front, "slow-load")
    assert wait_unleased(front, "slow-load") == []  # released once granted, nobody reading it
    served = chat(front, "slow-load", max_tokens=2)
    assert served.status_code == 200
    assert served.json()["choices"][0]["message"]["content"]


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


def _kill_agent_when_leased(front: str, killed: list[str]) -> None:
    for _ in range(400):
        holders = leased_on(front, "slow-chat")
        if holders:
            ray.kill(ray.get_actor(agent_name(holders[0]), namespace=NAMESPACE))
            killed.append(holders[0])
            return
        time.sleep(0.02)


def test_killing_an_agent_mid_stream_gives_the_error_chunk_then_other_nodes_serve(front: str) -> None:
    killed: list[str] = []
    killer = threading.Thread(target=_kill_agent_when_leased, args=(front, killed))
    body = {"model": "slow-chat", "stream": True, "messages": [{"role": "user", "content": "count"}]}
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{front}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        killer.start()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[len("data: ") :]))
    killer.join()
    assert killed, "the stream's node was never seen holding the lease"
    last = events[-1]
    assert last["choices"][0]["finish_reason"] == "error"
    assert last["error"]["type"] == "model_not_available"
    after = chat(front, "slow-chat", max_tokens=2)
    assert after.status_code == 200
    assert after.json()["choices"][0]["finish_reason"] == "length"
    status = httpx.get(f"{front}/v1/memory/status", timeout=30).json()
    alive = {node["node_id"]: node["alive"] for node in status["nodes"]}
    assert alive[killed[0]] is False and sum(alive.values()) == 1


def test_a_node_that_joins_later_gets_an_agent_and_takes_requests(cluster: Cluster, front: str) -> None:
    block = '[[models]]\nid = "late-chat"\nmodality = "text_generation"\nengine = "fake"\n'
    assert httpx.post(f"{front}/v1/models", json={"config": block}, timeout=60).status_code == 201
    for model in ("big-a", "big-b"):  # every node there is now has a big model in tier 1
        assert chat(front, model).status_code == 200
    assert move(front, "cold-big", "tier3_nvme_ssd").status_code == 200
    full = nodes_holding(front, "big-a") + nodes_holding(front, "big-b")
    known = {node["node_id"] for node in httpx.get(f"{front}/v1/memory/status", timeout=30).json()["nodes"]}
    try:
        kv_park(front, {"enabled": True})
        cluster.add_node(num_cpus=1, object_store_memory=80 * 1024 * 1024, resources={"fake_gpu": 1})
        joined: dict[str, Any] = {}
        for _ in range(600):  # the front notices the node, places its agent and stages its models
            nodes = httpx.get(f"{front}/v1/memory/status", timeout=30).json()["nodes"]
            joined = next((n for n in nodes if n["node_id"] not in known), {})
            if joined.get("models"):
                break
            time.sleep(0.2)
        assert joined.get("alive"), "no agent appeared on the node that joined"
        assert "late-chat" in {m["id"] for m in joined["models"]}  # the pool as it is now, not as it was at startup
        assert joined["kv_park"]["enabled"] is True  # and the switches
        response = chat(front, "cold-big")  # no room without evictions on the other nodes; room on the new one
        assert response.status_code == 200
        assert response.json()["hypnos_telemetry"]["evicted_models"] == []
        assert nodes_holding(front, "cold-big") == [joined["node_id"]]
        assert sorted(nodes_holding(front, "big-a") + nodes_holding(front, "big-b")) == sorted(full)
    finally:
        kv_park(front, {"enabled": False})
