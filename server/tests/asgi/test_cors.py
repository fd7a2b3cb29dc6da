"""CORS: loopback origins by default, configured origins with port wildcards, preflights answered early."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient
from server_kit import build_app, config

PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}


@pytest.fixture
def cors_client():
    raw = config(server={"api_keys": ["k"], "allowed_origins": ["http://app.example:*", "https://exact.example"]})
    with TestClient(build_app(raw)) as client:
        yield client


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:3000",
        "http://127.0.0.1:5173",
        "https://localhost",
        "http://[::1]:8080",
        "http://app.example:4444",
        "http://app.example",
        "https://exact.example",
    ],
)
def test_allowed_preflight(cors_client, origin):
    response = cors_client.options("/v1/chat/completions", headers={"Origin": origin, **PREFLIGHT})
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == origin
    methods = {m.strip() for m in response.headers["access-control-allow-methods"].split(",")}
    assert methods == {"GET", "POST", "OPTIONS"}
    assert "authorization" in response.headers["access-control-allow-headers"]
    assert response.headers["x-request-id"].startswith("req-")


@pytest.mark.parametrize("origin", ["http://evil.example", "http://localhost.evil.example", "http://exact.example:81"])
def test_refused_preflight(cors_client, origin):
    response = cors_client.options("/v1/chat/completions", headers={"Origin": origin, **PREFLIGHT})
    assert response.status_code == 403
    assert "access-control-allow-origin" not in response.headers
    assert response.json()["error"]["type"] == "permission_denied"
    assert response.headers["x-request-id"].startswith("req-")


def test_simple_request_exposes_the_telemetry_headers(cors_client):
    response = cors_client.get("/health", headers={"Origin": "http://localhost:3000"})
    assert response.headers["access-control-allow-origin"] == "http://localhost:3000"
    exposed = response.headers["access-control-expose-headers"]
    assert "x-request-id" in exposed and "x-hypnos-previous-tier" in exposed and "x-hypnos-estimated-wait-ms" in exposed


def test_refused_origin_gets_no_cors_headers_on_simple_requests(cors_client):
    response = cors_client.get("/health", headers={"Origin": "http://evil.example"})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


def test_errors_carry_cors_headers_too(cors_client):
    response = cors_client.get("/v1/models", headers={"Origin": "http://localhost:3000"})
    assert response.status_code == 401
    assert response.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_wildcard_origin_allows_any():
    with TestClient(build_app(config(server={"allowed_origins": ["*"]}))) as client:
        response = client.options("/v1/models", headers={"Origin": "http://anything.example", **PREFLIGHT})
        assert response.status_code == 204
