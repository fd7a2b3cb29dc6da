"""Non-canonical paths (`//v1/...`, `/%2Fv1/...`, dot segments, backslashes) never get past auth, admin or limits.

The route list comes from the app itself, so a new route is covered without touching this file.
"""

from __future__ import annotations

import json

import pytest
from hypnos_server.asgi.auth import AdminRoutes
from path_tricks import app_routes, tricks
from server_harness import call, running
from server_kit import build_app, config

KEYS = {
    "api_keys": ["admin-key"],
    "keys": [{"key": "user-key", "label": "alice"}, {"key": "spent-key", "label": "spent", "tokens_per_day": 0}],
}
KEY_KINDS = {"none": None, "user": "user-key", "admin": "admin-key", "over-limit": "spent-key"}
OPEN = {"/health", "/ready", "/metrics", "/", "/schema", "/docs"}  # and what lies under the prefixes below
OPEN_UNDER = ("/playground/", "/schema/", "/docs/")


def open_paths_of(app, metrics_closed: bool = False) -> set[str]:
    """The app's routes that answer without a key: the listed ones, the playground's assets, the schema pages."""
    listed = OPEN - ({"/metrics"} if metrics_closed else set())
    return {path for _, path in app_routes(app) if path in listed or path.startswith(OPEN_UNDER)}


def build(**server):
    return build_app(config(server={**KEYS, **server}))


def headers_for(key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    return headers


def expected_canonical(
    kind: str, method: str, path: str, status: int, open_paths: set[str], admin: AdminRoutes
) -> bool:
    """What a canonical request with this key kind may answer."""
    needs_admin = admin.needs_admin
    if path in open_paths:
        return status not in (401, 403, 429)
    if kind == "none":
        return status == 401
    if kind == "over-limit":  # not an admin key either: the pool routes refuse it first
        return status == (403 if needs_admin(method, path) else 429)
    if kind == "user" and needs_admin(method, path):
        return status == 403
    return status not in (401, 403, 429)


def test_the_route_list_is_the_apps_own():
    routes = app_routes(build())
    assert ("GET", "/v1/memory/status") in routes
    assert ("POST", "/v1/chat/completions") in routes
    assert ("POST", "/v1/logs/level") in routes
    assert ("GET", "/metrics") in routes
    assert len(routes) >= 15


@pytest.mark.parametrize("kind", list(KEY_KINDS))
@pytest.mark.parametrize("metrics_closed", [False, True])
async def test_every_route_every_trick_every_key_kind(kind, metrics_closed):
    app = build(metrics_require_auth=metrics_closed)
    open_paths = open_paths_of(app, metrics_closed)
    wrong = []
    async with running(app):
        for method, path in app_routes(app):
            body = b"{}" if method in ("POST", "PUT") else b""
            headers = headers_for(KEY_KINDS[kind])
            plain = await call(app, method, path, body=body, headers=headers)
            if not expected_canonical(kind, method, path, plain.status, open_paths, AdminRoutes.of(app)):
                wrong.append(f"{method} {path} [{kind}] -> {plain.status}")
            for scope_path, raw in tricks(path):
                response = await call(app, method, scope_path, body=body, headers=headers, raw_path=raw)
                error = json.loads(response.body).get("error", {}) if response.body.startswith(b"{") else {}
                if response.status != 404 or error.get("type") != "not_found" or "x-request-id" not in response.headers:
                    wrong.append(f"{method} {raw.decode()} [{kind}] -> {response.status} {response.body[:80]!r}")
    assert not wrong, "\n".join(wrong)


async def test_a_refused_key_stays_refused_on_a_trick_path():
    app = build()
    async with running(app):
        spent = headers_for("spent-key")
        assert (await call(app, "GET", "/v1/models", headers=spent)).status == 429
        assert (await call(app, "GET", "//v1/models", headers=spent)).status == 404


async def test_a_doubled_slash_404_names_the_base_url():
    """litellm's Anthropic provider given a base URL ending with `/` posts `//v1/messages`: the 404 says why."""
    app = build()
    async with running(app):
        answer = await call(app, "POST", "//v1/messages", body=b"{}", headers=headers_for(None))
        assert answer.status == 404 and "base URL" in json.loads(answer.body)["error"]["message"]


async def test_logs_cannot_be_raised_and_read_without_a_key():
    app = build()
    async with running(app):
        level = json.dumps({"level": "trace"}).encode()
        raised = await call(app, "POST", "//v1/logs/level", body=level, headers=headers_for(None))
        assert raised.status == 404
        read = await call(app, "GET", "/v1/logs", headers=headers_for("admin-key"))
        assert json.loads(read.body)["level"] == "info"


async def test_a_path_outside_v1_needs_the_key_too():
    app = build()
    async with running(app):
        assert (await call(app, "GET", "/nothing", headers=headers_for(None))).status == 401
        assert (await call(app, "GET", "/nothing", headers=headers_for("user-key"))).status == 404
