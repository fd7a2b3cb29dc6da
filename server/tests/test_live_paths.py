"""Path tricks against the real server (granian): raw request targets sent as-is, like `curl --path-as-is`."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from hypnos_server.testing import live_server
from path_tricks import app_routes, tricks
from server_kit import build_app, config

CONFIG = """
[server]
api_keys = ["admin-key"]
metrics_require_auth = true

[[server.keys]]
key = "user-key"
label = "alice"

[[server.keys]]
key = "spent-key"
label = "spent"
tokens_per_day = 0

[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"
modalities = ["vision", "speech_to_text"]

[[models]]
id = "fake-embed"
modality = "embeddings"
engine = "fake"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("paths") / "hypnos.toml"
    path.write_text(CONFIG)
    with live_server(path, env={"HYPNOS_PLUGINS": "fake"}, ready_timeout=60) as base:
        yield base


def raw_request(base: str, method: str, target: str, key: str | None) -> tuple[int, dict[str, str], bytes]:
    """One request with the target exactly as given (no client-side normalization)."""
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["authorization"] = f"Bearer {key}"
        body = b"{}" if method in ("POST", "PUT") else None
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("key", [None, "user-key", "admin-key", "spent-key"])
def test_no_trick_path_gets_through_granian(server, key):
    wrong = []
    for method, path in app_routes(build_app(config())):
        for _, raw in tricks(path):
            status, headers, body = raw_request(server, method, raw.decode(), key)
            error = json.loads(body).get("error", {}) if body.startswith(b"{") else {}
            if status != 404 or error.get("type") != "not_found" or "x-request-id" not in headers:
                wrong.append(f"{method} {raw.decode()} [{key}] -> {status} {body[:80]!r}")
    assert not wrong, "\n".join(wrong)


def test_canonical_paths_still_need_the_key(server):
    assert raw_request(server, "GET", "/v1/memory/status", None)[0] == 401
    assert raw_request(server, "GET", "/metrics", None)[0] == 401
    assert raw_request(server, "GET", "/v1/models", "spent-key")[0] == 429
    assert raw_request(server, "GET", "/v1/memory/status", "user-key")[0] == 200
    assert raw_request(server, "GET", "/health", None)[0] == 200


def test_other_spellings_never_answer_without_a_key(server):
    port = server.rsplit(":", 1)[1]
    targets = [
        f"http://127.0.0.1:{port}/v1/memory/status",
        f"http://127.0.0.1:{port}//v1/memory/status",
        "/v1/memory/status/",
        "/V1/memory/status",
        "/v1/Memory/status",
        "/v1/memory/status;x",
        "/v1/memory/status%00",
        "/%76%31/memory/status",
        "*",
    ]
    for target in targets:
        assert raw_request(server, "GET", target, None)[0] in (401, 404), target
