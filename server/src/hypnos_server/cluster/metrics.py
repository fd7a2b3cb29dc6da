"""The cluster's families for /metrics: every node's models and memory, labelled by node."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

TIER_NUMBER = {"tier1_gpu_vram": 1, "tier2_pinned_ram": 2, "tier3_nvme_ssd": 3}


class _NodesCollector(Collector):
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes

    def collect(self) -> Iterator[Any]:
        up = GaugeMetricFamily("hypnos_node_up", "1 while the node's agent answers.", labels=["node"])
        tier = GaugeMetricFamily("hypnos_node_model_tier", "Tier per model and node (1 GPU, 2 RAM, 3 disk).",
                                 labels=["node", "model"])  # fmt: skip
        leases = GaugeMetricFamily("hypnos_node_model_active_leases", "Requests holding the model on the node.",
                                   labels=["node", "model"])  # fmt: skip
        served = GaugeMetricFamily("hypnos_node_model_requests", "Requests served per model on the node.",
                                   labels=["node", "model"])  # fmt: skip
        vram = GaugeMetricFamily("hypnos_node_vram_bytes", "Tier 1 memory by kind per node.", labels=["node", "kind"])
        for node in self.nodes:
            name = node["node_id"]
            up.add_metric([name], 1.0 if node["alive"] else 0.0)
            for model in node.get("models", []):
                tier.add_metric([name, model["id"]], TIER_NUMBER.get(model["current_tier"], 3))
                leases.add_metric([name, model["id"]], model["active_leases"])
                served.add_metric([name, model["id"]], model["total_requests_served"])
            if "tier1_vram_used_bytes" in node:
                vram.add_metric([name, "used"], node["tier1_vram_used_bytes"])
                vram.add_metric([name, "free"], node["tier1_vram_free_bytes"])
        yield from (up, tier, leases, served, vram)


def node_metrics_text(nodes: list[dict[str, Any]]) -> bytes:
    """Prometheus text of the per-node families (appended to the front's own exposition)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_NodesCollector(nodes))
    return generate_latest(registry)
