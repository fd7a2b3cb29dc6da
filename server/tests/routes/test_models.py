"""GET /v1/models, enable/disable, and the memory routes."""

from __future__ import annotations

from server_kit import error_of


def test_models_list_hides_disabled(client):
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    ids = [m["id"] for m in body["data"]]
    assert ids == ["fake-chat", "fake-embed", "fake-image"]
    entry = body["data"][0]
    assert entry["object"] == "model" and entry["owned_by"] == "hypnos"
    assert entry["modality"] == "text_generation" and entry["current_tier"] == "tier3_nvme_ssd"
    assert entry["placement"]["primary_tier"] == "tier3_nvme_ssd" and entry["active_leases"] == 0
    assert len({m["created"] for m in body["data"]}) == 1


def test_retrieve_one_model_as_the_sdks_do(client):
    listed = client.get("/v1/models").json()["data"][1]
    assert client.get("/v1/models/fake-embed").json() == listed
    missing = client.get("/v1/models/ghost")
    assert missing.status_code == 404 and error_of(missing)["type"] == "model_not_found"
    client.post("/v1/models/fake-embed/disable")
    hidden = client.get("/v1/models/fake-embed")
    assert hidden.status_code == 404 and error_of(hidden)["type"] == "model_not_found"
    client.post("/v1/models/fake-embed/enable")


def test_disable_then_enable(client):
    response = client.post("/v1/models/fake-embed/disable")
    assert response.status_code == 200
    assert response.json()["enabled"] is False and response.json()["model"] == "fake-embed"
    assert "fake-embed" not in [m["id"] for m in client.get("/v1/models").json()["data"]]
    refused = client.post("/v1/embeddings", json={"model": "fake-embed", "input": "x"})
    assert refused.status_code == 404 and error_of(refused)["type"] == "model_disabled"
    assert client.post("/v1/models/fake-embed/enable").json()["enabled"] is True
    assert client.post("/v1/embeddings", json={"model": "fake-embed", "input": "x"}).status_code == 200


def test_enable_unknown_model_is_404(client):
    response = client.post("/v1/models/ghost/enable")
    assert response.status_code == 404 and error_of(response)["type"] == "model_not_found"


def test_memory_status_lists_every_model(client):
    body = client.get("/v1/memory/status").json()
    models = {m["id"]: m for m in body["models"]}
    assert set(models) == {"fake-chat", "fake-embed", "fake-image", "fake-off"}
    assert models["fake-off"]["enabled"] is False
    assert "vision" in models["fake-chat"]["modalities"]
    assert "capabilities" in body


def test_memory_tier_moves_a_model(client):
    response = client.post("/v1/memory/tier", json={"model": "fake-embed", "target_tier": "tier1_gpu_vram"})
    assert response.status_code == 200
    assert response.json()["placement"]["primary_tier"] == "tier1_gpu_vram"
    bad = client.post("/v1/memory/tier", json={"model": "fake-embed", "target_tier": "tier9"})
    assert bad.status_code == 400 and "target_tier" in error_of(bad)["message"]
    disabled = client.post("/v1/memory/tier", json={"model": "fake-off", "target_tier": "tier2_pinned_ram"})
    assert disabled.status_code == 404 and error_of(disabled)["type"] == "model_disabled"
