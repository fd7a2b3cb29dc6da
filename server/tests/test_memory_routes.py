"""GET /v1/memory/status, POST /v1/memory/tier and POST /v1/models/{id}/enable|disable over the real scheduler."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypnos.types import MemoryTier, Modality
from litestar.testing import TestClient
from server_kit import build_app, error_of, wait_ready

GiB = 1024**3

CONFIG: dict[str, Any] = {
    "server": {"profile": "voice_assistant"},
    "hardware": {"simulate": True, "simulate_vram_bytes": 2 * GiB, "pinned_ram_budget_bytes": 4 * GiB},
    "models": [
        {"id": "chat", "modality": "text_generation", "engine": "fake", "modalities": ["vision"], "priority": "high"},
        {"id": "embed", "modality": "embeddings", "engine": "fake", "initial_tier": "tier2_pinned_ram"},
        {"id": "huge", "modality": "text_generation", "engine": "fake", "fake": {"layers": 400}},
        {"id": "off", "modality": "text_generation", "engine": "fake", "enabled": False},
    ],
}

STATUS_KEYS = {
    "capabilities",
    "tier1_vram_used_bytes",
    "tier1_vram_free_bytes",
    "tier1_vram_real_free_bytes",
    "tier1_vram_real_total_bytes",
    "tier1_vram_unaccounted_bytes",
    "tier1_vram_effective_free_bytes",
    "tier2_pinned_ram_used_bytes",
    "tier2_pinned_ram_free_bytes",
    "physical_pool_free_bytes",
    "process_footprint_bytes",
    "process_memory_bytes",
    "process_memory_cap_bytes",
    "models",
    "recent_evictions",
    "kv_park",
    "profile",
}
CAPABILITY_KEYS = {
    "accelerator",
    "topology",
    "device_name",
    "total_vram_bytes",
    "usable_vram_budget_bytes",
    "pinned_ram_budget_bytes",
    "physical_memory_bytes",
    "simulated",
    "installed_memory_bytes",
    "tier2_to_tier1_bandwidth_gbps",
    "tier3_to_tier2_bandwidth_gbps",
}
MODEL_KEYS = {
    "id",
    "enabled",
    "modality",
    "modalities",
    "engine",
    "backend",
    "total_weight_bytes",
    "priority",
    "current_tier",
    "placement",
    "moe_offload",
    "expert_bytes",
    "active_leases",
    "idle_seconds",
    "total_requests_served",
    "requests_per_minute",
    "reload_estimate_ms",
    "service_ms",
    "estimated_wait_ms",
}
PLACEMENT_KEYS = {
    "primary_tier",
    "gpu_layers",
    "pinned_ram_layers",
    "ssd_layers",
    "vram_weight_bytes",
    "vram_kv_and_workspace_bytes",
    "pinned_ram_bytes",
    "allocated_context_len",
    "cpu_expert_layers",
}


@pytest.fixture
def memory_client() -> Iterator[TestClient[Any]]:
    """A ready client over CONFIG (simulated 2 GiB tier 1)."""
    with TestClient(build_app(CONFIG)) as client:
        wait_ready(client)
        yield client


def scheduler_of(client: TestClient[Any]) -> Any:
    return client.app.state.hypnos.scheduler


def models_of(client: TestClient[Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in client.get("/v1/memory/status").json()["models"]}


def test_status_has_every_field_of_section_14(memory_client: TestClient[Any]) -> None:
    response = memory_client.get("/v1/memory/status")
    assert response.status_code == 200
    body = response.json()
    assert STATUS_KEYS <= set(body)
    assert "gpu" not in body  # simulated: no NVIDIA device
    capabilities = body["capabilities"]
    assert CAPABILITY_KEYS <= set(capabilities)
    assert capabilities["simulated"] is True and capabilities["accelerator"] == "Cpu"
    assert capabilities["usable_vram_budget_bytes"] == 2 * GiB
    assert capabilities["pinned_ram_budget_bytes"] == 4 * GiB
    assert body["tier1_vram_real_free_bytes"] == body["tier1_vram_free_bytes"]
    assert body["tier1_vram_unaccounted_bytes"] == 0
    assert body["tier1_vram_used_bytes"] + body["tier1_vram_free_bytes"] == 2 * GiB
    assert body["process_memory_cap_bytes"] is None
    assert body["kv_park"] == {"enabled": False, "max_bytes": 4 * GiB, "used_bytes": 0, "models": []}
    assert body["profile"] == {
        "name": "voice_assistant",
        "objective": {"metric": "first_audio", "target_ms": 1500},
    }
    models = {m["id"]: m for m in body["models"]}
    assert set(models) == {"chat", "embed", "huge", "off"}
    for model in models.values():
        assert MODEL_KEYS <= set(model)
        assert PLACEMENT_KEYS <= set(model["placement"])
    assert models["embed"]["current_tier"] == "tier2_pinned_ram"  # staged at startup
    assert body["tier2_pinned_ram_used_bytes"] == models["embed"]["placement"]["pinned_ram_bytes"] > 0
    assert models["chat"]["modalities"] == ["text_generation", "vision"]
    assert models["chat"]["priority"] == "high" and models["off"]["enabled"] is False
    assert models["chat"]["service_ms"] is None and models["chat"]["estimated_wait_ms"] >= 0


def test_status_carries_latency_once_requests_were_served(memory_client: TestClient[Any]) -> None:
    memory_client.post("/v1/embeddings", json={"model": "embed", "input": "hello"})
    body = memory_client.get("/v1/memory/status").json()
    assert "latency" in body
    model = {m["id"]: m for m in body["models"]}["embed"]
    assert model["total_requests_served"] == 1 and model["service_ms"] is not None
    assert model["current_tier"] == "tier1_gpu_vram" and model["requests_per_minute"] > 0


def test_inference_responses_carry_the_lease_telemetry(memory_client: TestClient[Any]) -> None:
    response = memory_client.post("/v1/embeddings", json={"model": "embed", "input": "hello"})
    assert response.status_code == 200
    assert "x-hypnos-estimated-wait-ms" in response.headers
    telemetry = response.json()["hypnos_telemetry"]
    assert telemetry["previous_tier"] == "tier2_pinned_ram"
    assert telemetry["placement"]["primary_tier"] == "tier1_gpu_vram"
    assert telemetry["tier_switch_latency_ms"] >= 0 and telemetry["evicted_models"] == []
    assert "tier_switch_phases" in telemetry
    again = memory_client.post("/v1/embeddings", json={"model": "embed", "input": "hello"}).json()["hypnos_telemetry"]
    assert again["previous_tier"] == "tier1_gpu_vram" and again["tier_switch_latency_ms"] == 0


def test_deadline_refused_with_retry_after(memory_client: TestClient[Any]) -> None:
    scheduler_of(memory_client).get("chat").reload_ms[MemoryTier.TIER3] = 4200.0
    response = memory_client.post(
        "/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-hypnos-deadline-ms": "1000"},
    )
    assert response.status_code == 503
    assert error_of(response)["type"] == "deadline_unmeetable"
    assert response.headers["retry-after"] == "5"


def test_move_through_the_tiers(memory_client: TestClient[Any]) -> None:
    up = memory_client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier1_gpu_vram"})
    assert up.status_code == 200
    assert up.json()["model"] == "chat" and up.json()["placement"]["primary_tier"] == "tier1_gpu_vram"
    wider = memory_client.post(
        "/v1/memory/tier", json={"model": "chat", "target_tier": "tier1_gpu_vram", "context_len": 8192}
    )
    assert wider.status_code == 200 and wider.json()["placement"]["allocated_context_len"] == 8192
    warm = memory_client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier2_pinned_ram"})
    assert warm.json()["placement"]["primary_tier"] == "tier2_pinned_ram"
    cold = memory_client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier3_nvme_ssd"})
    assert cold.json()["placement"]["primary_tier"] == "tier3_nvme_ssd"
    assert models_of(memory_client)["chat"]["current_tier"] == "tier3_nvme_ssd"


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"model": "ghost", "target_tier": "tier1_gpu_vram"}, 404, "model_not_found"),
        ({"model": "off", "target_tier": "tier1_gpu_vram"}, 404, "model_disabled"),
        ({"model": "huge", "target_tier": "tier1_gpu_vram"}, 507, "insufficient_vram_or_ram"),
        ({"model": "chat", "target_tier": "tier1_gpu_vram", "context_len": 0}, 400, "invalid_request_error"),
        ({"model": "chat", "target_tier": "tier0"}, 400, "invalid_request_error"),
    ],
)
def test_move_refusals(memory_client: TestClient[Any], body: dict[str, Any], status: int, kind: str) -> None:
    response = memory_client.post("/v1/memory/tier", json=body)
    assert response.status_code == status
    assert error_of(response)["type"] == kind


def test_move_and_disable_refused_while_leased(memory_client: TestClient[Any]) -> None:
    state = scheduler_of(memory_client).get("chat")
    state.active_leases += 1  # as if a request held it
    try:
        moved = memory_client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier2_pinned_ram"})
        assert moved.status_code == 429 and error_of(moved)["type"] == "model_busy"
        assert "retry-after" not in moved.headers
        disabled = memory_client.post("/v1/models/chat/disable")
        assert disabled.status_code == 429 and error_of(disabled)["type"] == "model_busy"
    finally:
        state.active_leases -= 1
    assert models_of(memory_client)["chat"]["enabled"] is True


def test_disable_evicts_hides_and_refuses_then_enable_restores(memory_client: TestClient[Any]) -> None:
    memory_client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier1_gpu_vram"})
    disabled = memory_client.post("/v1/models/chat/disable")
    assert disabled.status_code == 200
    body = disabled.json()
    assert body["model"] == "chat" and body["enabled"] is False
    assert body["placement"]["primary_tier"] == "tier3_nvme_ssd"
    assert "chat" not in [m["id"] for m in memory_client.get("/v1/models").json()["data"]]
    assert models_of(memory_client)["chat"]["current_tier"] == "tier3_nvme_ssd"
    chat = {"model": "chat", "messages": [{"role": "user", "content": "x"}]}
    refused = memory_client.post("/v1/chat/completions", json=chat)
    assert refused.status_code == 404 and error_of(refused)["type"] == "model_disabled"
    enabled = memory_client.post("/v1/models/chat/enable")
    assert enabled.status_code == 200 and enabled.json()["enabled"] is True
    served = memory_client.post("/v1/chat/completions", json=chat)
    assert served.status_code == 200


def test_enable_disable_unknown_is_404(memory_client: TestClient[Any]) -> None:
    for action in ("enable", "disable"):
        response = memory_client.post(f"/v1/models/ghost/{action}")
        assert response.status_code == 404 and error_of(response)["type"] == "model_not_found"


def test_eviction_shows_in_recent_evictions(memory_client: TestClient[Any]) -> None:
    scheduler = scheduler_of(memory_client)
    scheduler.settings.hardware.min_gpu_layer_ratio = 1.0  # whole placements only, so room must be made
    budget = scheduler.budgets.tier1_bytes
    chat = scheduler.get("chat").estimate()
    # shrink tier 1 so that chat and embed cannot both be resident
    scheduler.tiers.budgets = _with_tier1(scheduler.tiers.budgets, chat.weight_bytes + GiB // 4)
    try:
        assert memory_client.post("/v1/embeddings", json={"model": "embed", "input": "x"}).status_code == 200
        response = memory_client.post(
            "/v1/chat/completions", json={"model": "chat", "messages": [{"role": "user", "content": "x"}]}
        )
        assert response.status_code == 200
        assert response.json()["hypnos_telemetry"]["evicted_models"] == ["embed"]
        evictions = memory_client.get("/v1/memory/status").json()["recent_evictions"]
        assert evictions[0]["model"] == "embed" and evictions[0]["for_model"] == "chat"
        assert evictions[0]["reason"] == "memory_budget" and evictions[0]["to_tier"] == "tier2_pinned_ram"
        assert evictions[0]["unix_ms"] > 0
    finally:
        scheduler.tiers.budgets = _with_tier1(scheduler.tiers.budgets, budget)


def _with_tier1(budgets: Any, tier1: int) -> Any:
    return dataclasses.replace(budgets, tier1_bytes=tier1)


def test_moe_offload_applies_now_when_idle_and_next_load_when_busy(memory_client: TestClient[Any]) -> None:
    memory_client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier1_gpu_vram"})
    now = memory_client.post("/v1/models/chat/moe-offload", json={"mode": "auto"})
    assert now.status_code == 200
    body = now.json()
    assert body["model"] == "chat" and body["moe_offload"] == "auto" and body["applies"] == "now"
    assert body["placement"]["primary_tier"] == "tier2_pinned_ram"  # an idle resident model drops to tier 2
    assert models_of(memory_client)["chat"]["moe_offload"] == "auto"
    state = scheduler_of(memory_client).get("chat")
    state.active_leases += 1  # as if a request held it
    try:
        busy = memory_client.post("/v1/models/chat/moe-offload", json={"mode": "on"})
        assert busy.status_code == 200 and busy.json()["applies"] == "next_load"
    finally:
        state.active_leases -= 1
    assert models_of(memory_client)["chat"]["moe_offload"] == "on"
    off = memory_client.post("/v1/models/embed/moe-offload", json={"mode": "off"})  # a dense model accepts it
    assert off.status_code == 200 and off.json()["applies"] == "now"


@pytest.mark.parametrize(
    ("model", "body", "status", "kind"),
    [
        ("chat", {"mode": "sometimes"}, 422, "invalid_request_error"),
        ("ghost", {"mode": "auto"}, 404, "model_not_found"),
        ("chat", {}, 400, "invalid_request_error"),
    ],
)
def test_moe_offload_refusals(
    memory_client: TestClient[Any], model: str, body: dict[str, Any], status: int, kind: str
) -> None:
    response = memory_client.post(f"/v1/models/{model}/moe-offload", json=body)
    assert response.status_code == status
    assert error_of(response)["type"] == kind
    assert models_of(memory_client)["chat"]["moe_offload"] == "off"


def test_kv_park_routes_configure_and_report(memory_client: TestClient[Any]) -> None:
    shown = memory_client.get("/v1/memory/kv-park")
    assert shown.status_code == 200
    assert shown.json() == {"enabled": False, "max_bytes": 4 * GiB, "used_bytes": 0, "models": []}
    on = memory_client.post("/v1/memory/kv-park", json={"enabled": True})
    assert on.status_code == 200 and on.json()["enabled"] is True and on.json()["max_bytes"] == 4 * GiB
    capped = memory_client.post("/v1/memory/kv-park", json={"max_bytes": GiB})
    assert capped.json() == {"enabled": True, "max_bytes": GiB, "used_bytes": 0, "models": []}
    assert memory_client.get("/v1/memory/status").json()["kv_park"] == capped.json()
    for body in ({}, {"max_bytes": -1}, {"enabled": "yes"}):
        refused = memory_client.post("/v1/memory/kv-park", json=body)
        assert refused.status_code == 400 and error_of(refused)["type"] == "invalid_request_error"
    empty = memory_client.post("/v1/memory/kv-park", content=b"")
    assert empty.status_code == 400
    assert memory_client.get("/v1/memory/kv-park").json()["max_bytes"] == GiB


MiB = 1024**2
WARM_CHAT = 8 * 64 * MiB + 32 * MiB  # the fake engine's default weights
PARKING_CONFIG: dict[str, Any] = {
    "hardware": {
        "simulate": True,
        "simulate_vram_bytes": 2 * GiB,
        "pinned_ram_budget_bytes": WARM_CHAT + 56 * MiB,
        "kv_park": {"enabled": True},
    },
    "models": [
        {"id": "chat", "modality": "text_generation", "engine": "fake", "fake": {"park_bytes": 32 * MiB}},
        {
            "id": "small",
            "modality": "embeddings",
            "engine": "fake",
            "fake": {"layers": 1, "layer_bytes": 16 * MiB, "non_layer_bytes": 16 * MiB},
        },
    ],
}


def test_parked_kv_is_tier2_memory_and_goes_before_a_warm_model() -> None:
    with TestClient(build_app(PARKING_CONFIG)) as client:
        wait_ready(client)
        ask = {"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}

        def tier2_used() -> int:
            return int(client.get("/v1/memory/status").json()["tier2_pinned_ram_used_bytes"])

        assert client.post("/v1/chat/completions", json=ask).status_code == 200
        assert tier2_used() == 0
        moved = client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier2_pinned_ram"})
        assert moved.status_code == 200
        status = client.get("/v1/memory/status").json()
        assert [m["model"] for m in status["kv_park"]["models"]] == ["chat"]
        assert status["kv_park"]["used_bytes"] == 32 * MiB
        assert status["tier2_pinned_ram_used_bytes"] == WARM_CHAT + 32 * MiB
        assert status["tier2_pinned_ram_free_bytes"] == 24 * MiB
        assert client.get("/v1/memory/kv-park").json()["used_bytes"] == 32 * MiB
        # 32 MiB more warm: the parked conversation is dropped, the warm chat model stays
        warm = client.post("/v1/memory/tier", json={"model": "small", "target_tier": "tier2_pinned_ram"})
        assert warm.status_code == 200
        status = client.get("/v1/memory/status").json()
        assert status["kv_park"]["used_bytes"] == 0 and status["recent_evictions"] == []
        assert {m["id"]: m["current_tier"] for m in status["models"]} == {
            "chat": "tier2_pinned_ram",
            "small": "tier2_pinned_ram",
        }
        assert status["tier2_pinned_ram_used_bytes"] == WARM_CHAT + 32 * MiB
        again = client.post("/v1/chat/completions", json=ask).json()["hypnos_telemetry"]
        assert again["previous_tier"] == "tier2_pinned_ram"
        assert "kv_restored_tokens" not in again["tier_switch_phases"]  # it was dropped: nothing came back


def test_a_restored_conversation_leaves_tier2() -> None:
    with TestClient(build_app(PARKING_CONFIG)) as client:
        wait_ready(client)
        ask = {"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
        assert client.post("/v1/chat/completions", json=ask).status_code == 200
        client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier2_pinned_ram"})
        assert client.get("/v1/memory/status").json()["tier2_pinned_ram_used_bytes"] == WARM_CHAT + 32 * MiB
        telemetry = client.post("/v1/chat/completions", json=ask).json()["hypnos_telemetry"]
        assert telemetry["tier_switch_phases"]["kv_restored_tokens"] == 32 * MiB // (16 * 1024)
        status = client.get("/v1/memory/status").json()
        assert status["kv_park"] == {"enabled": True, "max_bytes": 4 * GiB, "used_bytes": 0, "models": []}
        assert status["tier2_pinned_ram_used_bytes"] == 0


def test_the_request_log_names_the_model_of_admin_routes(memory_client: TestClient[Any]) -> None:
    memory_client.delete("/v1/logs")
    assert memory_client.post("/v1/models/chat/disable").status_code == 200
    assert memory_client.post("/v1/models/chat/enable").status_code == 200
    assert memory_client.post("/v1/models/chat/moe-offload", json={"mode": "off"}).status_code == 200
    moved = memory_client.post("/v1/memory/tier", json={"model": "chat", "target_tier": "tier2_pinned_ram"})
    assert moved.status_code == 200
    assert memory_client.post("/v1/models/nope/disable").status_code == 404
    records = memory_client.get("/v1/logs").json()["records"]
    seen = sorted((r["route"], r["model"]) for r in records)
    assert seen == [
        ("/v1/memory/tier", "chat"),
        ("/v1/models/{model_id}/disable", "chat"),
        ("/v1/models/{model_id}/disable", "nope"),
        ("/v1/models/{model_id}/enable", "chat"),
        ("/v1/models/{model_id}/moe-offload", "chat"),
    ]


def test_status_shows_the_core_share_while_a_model_computes(memory_client: TestClient[Any]) -> None:
    scheduler = scheduler_of(memory_client)
    portal = memory_client.blocking_portal  # the loop the app (and its scheduler) runs on
    cores = memory_client.get("/v1/memory/status").json()["capabilities"]["cpu_cores"]
    assert cores == scheduler.cores.cores and len(cores) >= 1
    assert models_of(memory_client)["chat"]["cores"] == []  # idle: no share
    entered = threading.Event()
    release = portal.call(asyncio.Event)

    async def hold() -> None:
        async with scheduler.lease("chat", Modality.TEXT_GENERATION):
            entered.set()
            await release.wait()

    held = portal.start_task_soon(hold)
    assert entered.wait(10)
    try:
        assert models_of(memory_client)["chat"]["cores"] == cores  # alone: every core
    finally:
        portal.call(release.set)
        held.result(10)
    assert models_of(memory_client)["chat"]["cores"] == []
