"""Several keys against the real server: a user key changes nothing for others and reads only its own records."""

from __future__ import annotations

import json

from fuzz_kit import AUTH, USER_AUTH, raw_request
from hypnos.config import settings_from_mapping
from hypnos_server.app import create_app
from hypnos_server.asgi.auth import AdminRoutes
from hypnos_server.openapi import ROUTE_DOCS

needs_admin = AdminRoutes.of(create_app(settings_from_mapping({}))).needs_admin  # the handlers marked admin

ADMIN_ROUTES = sorted(
    (method, path.replace("{model_id}", "fake-embed"))
    for method, path in ROUTE_DOCS
    if needs_admin(method, path.replace("{model_id}", "fake-embed"))
)


def test_the_admin_routes_are_the_ones_the_spec_names() -> None:
    paths = {path for _, path in ADMIN_ROUTES}
    assert {"/v1/logs/level", "/v1/memory/tier", "/v1/memory/kv-park", "/v1/models/fake-embed/disable"} <= paths
    assert len(ADMIN_ROUTES) == 10


def test_a_user_key_gets_403_on_every_admin_route(server: str) -> None:
    wrong = []
    for method, path in ADMIN_ROUTES:
        headers = {**USER_AUTH, "content-type": "application/json"}
        answer = raw_request(server, method, path, headers, b"{}")
        error = json.loads(answer.body or b"{}").get("error", {})
        if answer.status != 403 or error.get("type") != "permission_denied":
            wrong.append((method, path, answer.status))
    assert wrong == []


def test_a_user_key_reads_only_its_own_records(server: str) -> None:
    # the fuzzers share this server and may have turned the log off: the admin turns it back on
    as_json = {**AUTH, "content-type": "application/json"}
    assert raw_request(server, "POST", "/v1/logs/level", as_json, json.dumps({"level": "info"}).encode()).status == 200
    body = json.dumps({"model": "fake-embed", "input": "admin's secret"}).encode()
    raw_request(server, "POST", "/v1/embeddings", as_json, body)
    answer = raw_request(server, "GET", "/v1/logs?limit=200", USER_AUTH)
    assert answer.status == 200
    assert {record["key"] for record in json.loads(answer.body)["records"]} <= {"fuzz-user"}
    admin = json.loads(raw_request(server, "GET", "/v1/logs?limit=200", AUTH).body)["records"]
    assert any(record["route"] == "/v1/embeddings" for record in admin)
