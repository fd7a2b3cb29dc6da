"""docs/api.md documents every served route, and nothing else: each `METHOD /path` of the served OpenAPI document
and each WebSocket route has its heading there; each heading is a route this server serves, or a plugin route its
plugin declares."""

from __future__ import annotations

import re
from pathlib import Path

from litestar.routes import HTTPRoute, WebSocketRoute
from litestar.testing import TestClient
from server_kit import build_app

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "api.md"
HEADING = re.compile(r"^#{2,4} ((?:GET|POST|PUT|DELETE|PATCH|WS)) (/\S*)(?: \(plugin: ([\w-]+)\))?\s*$")
METHODS = ("get", "post", "put", "delete", "patch")


def documented() -> dict[tuple[str, str], str | None]:
    """(method, path) -> the plugin that serves it (None: the server), from the reference's headings."""
    found: dict[tuple[str, str], str | None] = {}
    for line in REFERENCE.read_text(encoding="utf-8").splitlines():
        match = HEADING.match(line)
        if match:
            method, path, plugin = match.groups()
            assert (method, path) not in found, f"{method} {path} is documented twice"
            found[(method, path)] = plugin
    return found


def plain(path: str) -> str:
    """A route path without Litestar's converters: {model_id:str} -> {model_id}."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def served() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(the OpenAPI document's routes plus the WebSocket routes, every route the app answers)."""
    app = build_app()
    with TestClient(app) as client:
        document = client.get("/schema/openapi.json").json()
    in_schema = {(m.upper(), path) for path, ops in document["paths"].items() for m in ops if m in METHODS}
    everything = set(in_schema)
    for route in app.routes:
        if isinstance(route, WebSocketRoute):
            in_schema.add(("WS", plain(route.path)))
            everything.add(("WS", plain(route.path)))
        elif isinstance(route, HTTPRoute):
            everything |= {(m, plain(route.path)) for m in route.methods if m.lower() in METHODS}
    return in_schema, everything


def test_every_served_route_is_in_the_reference() -> None:
    in_schema, _ = served()
    missing = sorted(in_schema - set(documented()))
    assert missing == [], f"add a `### METHOD /path` heading to docs/api.md for each of {missing}"


def test_every_route_in_the_reference_is_served() -> None:
    _, everything = served()
    for (method, path), plugin in documented().items():
        if plugin is None:
            assert (method, path) in everything, f"docs/api.md documents {method} {path}, which is not served"
            continue
        sources = "\n".join(p.read_text() for p in (ROOT / "plugins" / plugin / "src").rglob("*.py"))
        declared = {plain(p) for p in re.findall(rf'@{method.lower()}\(\s*"([^"]+)"', sources)}
        assert path in declared, f"docs/api.md says {plugin} serves {method} {path}; its source declares {declared}"


def test_the_browsable_reference_is_served_open_under_the_playgrounds_policy() -> None:
    from hypnos_server.routes.playground import CONTENT_SECURITY_POLICY
    from server_kit import config

    with TestClient(build_app(config(server={"api_keys": ["k"]}))) as client:
        page = client.get("/docs")
        assert page.status_code == 200 and page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        scripts = re.findall(r'src="(/docs/[^"]+)"', page.text)
        assert scripts == ["/docs/swagger-ui-bundle.js", "/docs/docs.js"]
        for path in [*scripts, "/docs/swagger-ui.css", "/docs/docs.css"]:
            assert client.get(path).status_code == 200, path
        assert "/schema/openapi.json" in client.get("/docs/docs.js").text
        assert client.get("/docs/nothing.js").status_code == 404
        assert client.get("/v1/models").status_code == 401  # the API itself still needs the key
