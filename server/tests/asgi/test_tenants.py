"""Tenants apart: a non-admin key reads only its own request-log records and cannot change what every key gets."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient
from server_kit import build_app, config, error_of, wait_ready

TENANTS = {
    "api_keys": ["admin-key"],
    "keys": [{"key": "alice-key", "label": "alice"}, {"key": "bob-key", "label": "bob"}],
}
ASK = {"model": "fake-chat", "messages": [{"role": "user", "content": "my secret plan"}]}

# Every route that changes the service, the placement or the log for every key (with a body the handler accepts).
ADMIN_ROUTES = [
    ("POST", "/v1/logs/level", {"level": "trace"}),
    ("DELETE", "/v1/logs", None),
    ("POST", "/v1/models/fake-chat/disable", None),
    ("POST", "/v1/models/fake-chat/enable", None),
    ("POST", "/v1/models/fake-chat/moe-offload", {"mode": "auto"}),
    ("POST", "/v1/memory/tier", {"model": "fake-embed", "target_tier": "tier2_pinned_ram"}),
    ("POST", "/v1/memory/kv-park", {"enabled": True}),
]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def tenants():
    with TestClient(build_app(config(server=TENANTS))) as client:
        wait_ready(client)
        yield client


def chat_as(client: TestClient, key: str) -> str:
    response = client.post("/v1/chat/completions", json=ASK, headers=bearer(key))
    assert response.status_code == 200, response.text
    return response.headers["x-request-id"]


def test_a_user_key_lists_only_its_own_records(tenants):
    bob_call = chat_as(tenants, "bob-key")
    alice_call = chat_as(tenants, "alice-key")
    seen = tenants.get("/v1/logs", headers=bearer("alice-key")).json()
    assert [record["id"] for record in seen["records"]] == [alice_call]
    assert seen["stored"] == 1
    asked_for_bob = tenants.get("/v1/logs", params={"key": "bob"}, headers=bearer("alice-key")).json()
    assert asked_for_bob["records"] == []
    admin = tenants.get("/v1/logs", headers=bearer("admin-key")).json()
    assert {record["id"] for record in admin["records"]} == {alice_call, bob_call}


def test_another_keys_record_by_id_is_404_for_a_user_key(tenants):
    bob_call = chat_as(tenants, "bob-key")
    response = tenants.get(f"/v1/logs/{bob_call}", headers=bearer("alice-key"))
    assert response.status_code == 404
    assert error_of(response)["type"] == "not_found"
    assert tenants.get(f"/v1/logs/{bob_call}", headers=bearer("bob-key")).json()["id"] == bob_call
    assert tenants.get(f"/v1/logs/{bob_call}", headers=bearer("admin-key")).json()["key"] == "bob"


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
def test_changes_for_every_key_need_an_admin_key(tenants, method, path, body):
    refused = tenants.request(method, path, json=body, headers=bearer("alice-key"))
    assert refused.status_code == 403
    assert error_of(refused) == {"type": "permission_denied", "message": f"{method} {path} needs an admin key"}
    allowed = tenants.request(method, path, json=body, headers=bearer("admin-key"))
    assert allowed.status_code == 200, allowed.text


def test_a_user_key_cannot_raise_the_level_to_read_prompts(tenants):
    assert tenants.post("/v1/logs/level", json={"level": "debug"}, headers=bearer("alice-key")).status_code == 403
    assert tenants.get("/v1/logs", headers=bearer("admin-key")).json()["level"] == "info"


def test_a_user_key_cannot_clear_the_log(tenants):
    bob_call = chat_as(tenants, "bob-key")
    assert tenants.delete("/v1/logs", headers=bearer("alice-key")).status_code == 403
    assert tenants.get(f"/v1/logs/{bob_call}", headers=bearer("bob-key")).status_code == 200


def test_plain_api_keys_are_all_admins_and_see_every_record():
    with TestClient(build_app(config(server={"api_keys": ["one-key", "two-key"]}))) as client:
        wait_ready(client)
        first = chat_as(client, "one-key")
        assert client.post("/v1/logs/level", json={"level": "debug"}, headers=bearer("two-key")).status_code == 200
        records = client.get("/v1/logs", headers=bearer("two-key")).json()["records"]
        assert [record["id"] for record in records] == [first]
        assert client.post("/v1/models/fake-chat/disable", headers=bearer("two-key")).status_code == 200
