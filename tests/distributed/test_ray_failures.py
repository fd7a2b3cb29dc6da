"""Hypnos on a Ray cluster when things go away: clients hanging up, an agent killed mid-stream, a node joining late
(run after test_ray_cluster.py: they change the shared cluster)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
import ray
from hypnos_server.cluster.front import NAMESPACE, agent_name
from ray.cluster_utils import Cluster

from .ray_front import chat, kv_park, leased_on, move, nodes_holding

pytestmark = pytest.mark.distributed


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
