"""The playground route (section 1): `/` and its files need no key; /v1 stays guarded and never serves the page."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

KEYED = config(server={"api_keys": ["sekret"]})


@pytest.fixture
def keyed() -> TestClient:
    with TestClient(build_app(KEYED)) as client:
        wait_ready(client)
        yield client


def test_page_and_scripts_load_without_a_key(keyed: TestClient) -> None:
    page = keyed.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script type="module" src="/playground/app.js"></script>' in page.text
    for name, media in (("app.js", "text/javascript"), ("api.js", "text/javascript"), ("style.css", "text/css")):
        response = keyed.get(f"/playground/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith(media)
        assert response.headers["x-request-id"].startswith("req-")


def test_v1_stays_guarded_next_to_the_page(keyed: TestClient) -> None:
    for path in ("/v1/models", "/v1/", "/v1/index.html", "/v1/playground/app.js"):
        response = keyed.get(path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert keyed.get("/v1/models", headers={"Authorization": "Bearer sekret"}).status_code == 200


@pytest.mark.parametrize("name", ["missing.js", "app.py", "..%2Fapp.py", ".hidden.js", "APP.JS", "index.html.bak"])
def test_only_the_playground_files_are_served(keyed: TestClient, name: str) -> None:
    response = keyed.get(f"/playground/{name}")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"


def test_the_page_and_its_polling_stay_out_of_the_request_log() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        client.get("/")
        client.get("/playground/app.js")
        client.get("/v1/memory/status")
        client.get("/v1/memory/kv-park")
        client.post("/v1/embeddings", json={"model": "fake-embed", "input": "x"})
        routes = [record["route"] for record in client.get("/v1/logs").json()["records"]]
        assert routes == ["/v1/embeddings"]


def test_the_page_and_its_files_forbid_inline_script_and_framing(keyed: TestClient) -> None:
    for path in ("/", "/playground/app.js", "/playground/style.css"):
        headers = keyed.get(path).headers
        policy = [part.strip() for part in headers["content-security-policy"].split(";")]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy, path
        assert "script-src 'self'" in policy and "style-src 'self'" in policy, path
        assert "unsafe-inline" not in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY", path


class InlineFinder(HTMLParser):
    """Collects what a `script-src 'self'; style-src 'self'` policy would block in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.blocked: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        self.blocked += [f"{tag} {name}=" for name in names if name.startswith("on") or name == "style"]
        self.blocked += [
            f"{tag} javascript: URL" for value in names.values() if (value or "").startswith("javascript:")
        ]
        if tag == "style":
            self.blocked.append("a <style> element")
        self._in_script = tag == "script"
        if tag == "script" and not names.get("src"):
            self.blocked.append("an inline <script>")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False


def test_the_page_has_no_inline_script_handler_or_style(keyed: TestClient) -> None:
    finder = InlineFinder()
    finder.feed(keyed.get("/").text)
    assert finder.blocked == []


def test_scripts_never_write_a_style_attribute() -> None:
    from importlib import resources

    folder = resources.files("hypnos_server").joinpath("playground")
    scripts = {item.name: item.read_text(encoding="utf-8") for item in folder.iterdir() if item.name.endswith(".js")}
    assert "api.js" in scripts and "vendor-purify.js" in scripts
    # the vendored libraries (marked, DOMPurify) are third-party code, kept as released; ours must not do these
    ours = {name: text for name, text in scripts.items() if not name.startswith("vendor-")}
    for name, text in ours.items():  # a style attribute set from script is inline style the policy blocks
        assert 'setAttribute("style"' not in text and "innerHTML" not in text, name
