"""The Ray cluster the distributed tests share (one a session): its config, the cluster and front fixtures, helpers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import ray
from hypnos_llama.testing import write_tiny_llama
from hypnos_server.cluster.front import NAMESPACE
from hypnos_server.testing import live_server
from ray.cluster_utils import Cluster

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


@pytest.fixture(scope="session")
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


@pytest.fixture(scope="session")
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


def kv_park(base: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    url = f"{base}/v1/memory/kv-park"
    response = httpx.post(url, json=body, timeout=60) if body else httpx.get(url, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def node_kv_parks(base: str) -> list[dict[str, Any]]:
    status = httpx.get(f"{base}/v1/memory/status", timeout=30).json()
    return [node["kv_park"] for node in status["nodes"] if node["alive"]]
