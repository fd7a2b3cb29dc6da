"""API keys: 401 shape and header, bearer parsing, open routes, admin-only routes."""

from __future__ import annotations

import pytest
from hypnos.hookspecs import hookimpl
from hypnos_server.plugin_api import ADMIN_OPT
from litestar import route
from litestar.testing import TestClient
from path_tricks import app_routes
from server_kit import build_app, config, error_of, wait_ready

MISSING = {
    "message": "Missing API key. Send it as `Authorization: Bearer <key>` (server.api_keys).",
    "type": "invalid_request_error",
    "param": None,
    "code": "invalid_api_key",
}
KEYS = {"api_keys": ["admin-key"], "keys": [{"key": "plain-key", "label": "alice"}]}


@pytest.fixture
def keyed():
    with TestClient(build_app(config(server=KEYS))) as client:
        wait_ready(client)
        yield client


def test_missing_key_is_401_with_the_spec_body_and_header(keyed):
    response = keyed.get("/v1/models")
    assert response.status_code == 401
    assert response.json() == {"error": MISSING}
    assert response.headers["www-authenticate"] == 'Bearer realm="hypnos"'
    assert response.headers["x-request-id"].startswith("req-")


@pytest.mark.parametrize("header", ["Basic abc", "Bearer", "Bearer wrong-key", "plain-key"])
def test_malformed_or_unknown_key_is_401(keyed, header):
    response = keyed.get("/v1/models", headers={"Authorization": header})
    assert response.status_code == 401
    error = error_of(response)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, "invalid_api_key")
    assert response.headers["www-authenticate"] == 'Bearer realm="hypnos"'


@pytest.mark.parametrize(
    "header", ["Bearer plain-key", "bearer plain-key", "BEARER   plain-key  ", "  Bearer admin-key"]
)
def test_scheme_is_case_insensitive_and_whitespace_trimmed(keyed, header):
    assert keyed.get("/v1/models", headers={"Authorization": header}).status_code == 200


def test_health_ready_and_metrics_stay_open(keyed):
    assert keyed.get("/health").status_code == 200
    assert keyed.get("/ready").status_code == 200
    assert keyed.get("/metrics").status_code != 401


def test_metrics_closed_when_the_operator_asks():
    with TestClient(build_app(config(server={**KEYS, "metrics_require_auth": True}))) as client:
        assert client.get("/metrics").status_code == 401


def test_unknown_v1_route_needs_a_key_too(keyed):
    assert keyed.get("/v1/nothing").status_code == 401
    response = keyed.get("/v1/nothing", headers={"Authorization": "Bearer plain-key"})
    assert response.status_code == 404
    assert error_of(response)["type"] == "not_found"


POOL_ROUTES = [("POST", "/v1/models"), ("PUT", "/v1/models/fake-chat"), ("DELETE", "/v1/models/fake-chat")]


class PoolStandIn:
    """The pool-changing routes (section 6) answering 200, for as long as the server does not serve them itself."""

    @hookimpl
    def hypnos_routes(self) -> list:
        """POST /v1/models, PUT and DELETE /v1/models/{model_id}."""

        @route("/v1/models", http_method=["POST"], status_code=200, sync_to_thread=False)
        def add() -> dict:
            return {"reached": True}

        @route("/v1/models/{model_id:str}", http_method=["PUT", "DELETE"], status_code=200, sync_to_thread=False)
        def change() -> dict:
            return {"reached": True}

        return [add, change]


@pytest.fixture
def pool_client():
    """A keyed app whose pool routes are real handlers: the server's own once it has them, else the stand-ins."""
    app = build_app(config(server=KEYS))
    if not set(POOL_ROUTES) <= set(app_routes(app)):
        app = build_app(config(server=KEYS), plugins=[PoolStandIn()])
    with TestClient(app) as client:
        wait_ready(client)
        yield client


@pytest.mark.parametrize(("method", "path"), POOL_ROUTES)
def test_pool_changes_need_an_admin_key(pool_client, method, path):
    assert (method, path) in app_routes(pool_client.app)
    response = pool_client.request(method, path, headers={"Authorization": "Bearer plain-key"}, json={})
    assert response.status_code == 403
    assert error_of(response)["type"] == "permission_denied"
    admin = pool_client.request(method, path, headers={"Authorization": "Bearer admin-key"}, json={})
    assert admin.status_code not in (401, 403, 404, 405)  # the handler itself answered
    assert "error" not in admin.json() or admin.json()["error"]["type"] == "invalid_request_error"


def test_env_keys_are_admin_keys(monkeypatch):
    from hypnos.config import apply_environment, settings_from_mapping
    from hypnos.plugins import make_plugin_manager
    from hypnos.testing import fake_plugin
    from hypnos_server.app import create_app

    settings = apply_environment(settings_from_mapping(config()), {"HYPNOS_API_KEYS": "k1, k2"})
    app = create_app(settings, make_plugin_manager(autoload=False, plugins=[fake_plugin]))
    with TestClient(app) as client:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer k2"}).status_code == 200


def test_no_keys_configured_ignores_the_header(client):
    assert client.get("/v1/models", headers={"Authorization": "Bearer whatever"}).status_code == 200
    assert client.get("/v1/models").status_code == 200


def test_the_key_is_never_logged_but_its_label_is_recorded(caplog):
    app = build_app(config(server={"api_keys": ["secret-admin"], "keys": [{"key": "secret-alice", "label": "alice"}]}))
    records = []
    app.state.hypnos.observers.append(records.append)
    with TestClient(app) as client:
        wait_ready(client)
        client.get("/v1/models", headers={"Authorization": "Bearer secret-alice"})
        client.get("/v1/models", headers={"Authorization": "Bearer secret-admin"})
    labels = [r.key for r in records if r.path == "/v1/models"]
    assert labels[0] == "alice"
    assert labels[1].startswith("key-") and len(labels[1]) == 12
    assert "secret-" not in caplog.text


class AdminPlugin:
    """A plugin with one admin-only route (its handler marks it) and one open to every key."""

    @hookimpl
    def hypnos_routes(self) -> list:
        """POST /v1/plugin-admin (admin) and POST /v1/plugin-open."""

        @route("/v1/plugin-admin/{name:str}", http_method=["POST"], status_code=200, opt={ADMIN_OPT: True})
        async def change(name: str) -> dict:
            return {"changed": name}

        @route("/v1/plugin-open", http_method=["POST"], status_code=200)
        async def read() -> dict:
            return {"reached": True}

        return [change, read]


def test_a_plugin_route_marked_admin_needs_an_admin_key():
    with TestClient(build_app(config(server=KEYS), plugins=[AdminPlugin()])) as client:
        wait_ready(client)
        user, admin = {"Authorization": "Bearer plain-key"}, {"Authorization": "Bearer admin-key"}
        refused = client.post("/v1/plugin-admin/x", headers=user)
        assert refused.status_code == 403 and error_of(refused)["type"] == "permission_denied"
        assert client.post("/v1/plugin-admin/x", headers=admin).json() == {"changed": "x"}
        assert client.post("/v1/plugin-open", headers=user).json() == {"reached": True}
