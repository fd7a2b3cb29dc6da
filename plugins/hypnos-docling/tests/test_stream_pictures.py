"""Streaming page events, cancellation, the picture store (list, fetch, expire, delete), describe_pictures."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypnos_docling import testing
from hypnos_docling.testing import convert, read_events

from .conftest import API_KEY, OTHER_KEY, write_config


def test_stream_gives_started_pages_in_order_document_and_done(client: Any) -> None:
    files = {"file": ("report.pdf", testing.report_pdf())}
    with client.stream("POST", "/v1/documents/convert", data={"model": "docling", "stream": "yes"}, files=files) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = read_events(r)
    assert events[-1] == "[DONE]"
    started, *pages, document = events[:-1]
    assert started["object"] == "document.started"
    assert started["page_count"] == 3 and started["pages"] == [1, 2, 3]
    assert [page["object"] for page in pages] == ["document.page"] * 3
    assert [page["page"] for page in pages] == [1, 2, 3]
    assert "## Chapter 2: Results" in pages[1]["markdown"]
    assert document["object"] == "document" and document["pages"] == []
    assert testing.BROKEN_SENTENCE in document["markdown"]
    assert document["usage"]["pages"] == 3


def test_stream_refuses_a_bad_document_with_its_http_status(client: Any) -> None:
    files = {"file": ("broken.pdf", b"%PDF-1.4\n garbage")}
    response = client.post("/v1/documents/convert", data={"model": "docling", "stream": "true"}, files=files)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_hanging_up_stops_the_conversion_at_the_next_page(client: Any, server_config: Path) -> None:
    pages = 120
    files = {"file": ("hangup.pdf", testing.long_pdf(pages))}
    with client.stream("POST", "/v1/documents/convert", data={"model": "docling", "stream": "1"}, files=files) as r:
        first_page = next(line for line in r.iter_lines() if '"document.page"' in line)
        assert '"page":1' in first_page
    log = server_config.with_suffix(".log")
    deadline = time.monotonic() + 60
    while "conversion of hangup.pdf cancelled" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    line = next(line for line in log.read_text().splitlines() if "conversion of hangup.pdf cancelled" in line)
    done = int(line.split("cancelled after ")[1].split(" of ")[0])
    assert done < pages

    def went_away() -> bool:
        logs = client.get("/v1/logs", params={"model": "docling", "limit": 20}).json()["records"]
        return any(record["stream"] and "went away" in (record.get("error") or "") for record in logs)

    deadline = time.monotonic() + 30  # the record lands once the cancelled conversion has stopped
    while not went_away() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert went_away()
    answer = convert(client, testing.report_html(), "r.html")  # the model serves on
    assert "Web Report" in answer["markdown"]


def test_pictures_are_listed_fetched_and_deleted(client: Any) -> None:
    answer = convert(client, testing.report_pdf(), "report.pdf", return_pictures="on")
    document_id = answer["id"]
    assert document_id.startswith("doc-") and answer["pictures_expire_at"].endswith("Z")
    urls = answer["pages"][1]["picture_urls"]
    assert urls == [f"/v1/documents/{document_id}/pictures/1"]
    assert "picture_urls" in answer["pages"][0] and answer["pages"][0]["picture_urls"] == []
    listing = client.get(f"/v1/documents/{document_id}/pictures").json()
    assert listing["object"] == "list" and listing["document_id"] == document_id
    [record] = listing["data"]
    assert record["index"] == 1 and record["page"] == 2 and record["mime"] == "image/png"
    assert record["width"] == 96 and record["height"] == 64 and "image" not in record
    assert record["bbox"]["coord_origin"] == "BOTTOMLEFT" and record["page_size"] == {"width": 612.0, "height": 792.0}
    full = client.get(urls[0]).json()
    png = base64.b64decode(full["image"])
    assert png.startswith(b"\x89PNG") and full["bytes"] == len(png)
    raw = client.get(urls[0], params={"format": "image"})
    assert raw.status_code == 200 and raw.content == png
    assert raw.headers["content-type"] == "image/png"
    assert raw.headers["cache-control"] == "private, no-store"
    assert client.get(f"/v1/documents/{document_id}/pictures/2").status_code == 404
    deleted = client.delete(f"/v1/documents/{document_id}").json()
    assert deleted == {"object": "document.deleted", "id": document_id, "deleted": True}
    gone = client.get(f"/v1/documents/{document_id}/pictures")
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "not_found"
    assert client.delete(f"/v1/documents/{document_id}").status_code == 404


def test_another_keys_pictures_are_404_never_403(client: Any) -> None:
    answer = convert(client, testing.report_pdf(), "report.pdf", return_pictures="on")
    document_id = answer["id"]
    other = {"Authorization": f"Bearer {OTHER_KEY}"}
    for method, path in [
        ("GET", f"/v1/documents/{document_id}/pictures"),
        ("GET", f"/v1/documents/{document_id}/pictures/1"),
        ("DELETE", f"/v1/documents/{document_id}"),
    ]:
        refused = client.request(method, path, headers=other)
        assert refused.status_code == 404 and refused.json()["error"]["type"] == "not_found", (method, path)
    assert client.get(f"/v1/documents/{document_id}/pictures/1", params={"format": "image"}).status_code == 200
    files = {"file": ("report.pdf", testing.report_pdf())}
    fields = {"model": "docling", "return_pictures": "on"}
    mine = client.post("/v1/documents/convert", data=fields, files=files, headers=other).json()["id"]
    assert client.get(f"/v1/documents/{mine}/pictures").status_code == 404  # an admin key is another key too
    assert client.get(f"/v1/documents/{mine}/pictures", headers=other).status_code == 200


def test_stream_started_event_carries_the_document_id(client: Any) -> None:
    files = {"file": ("report.pdf", testing.report_pdf())}
    data = {"model": "docling", "stream": "on", "return_pictures": "true"}
    with client.stream("POST", "/v1/documents/convert", data=data, files=files) as r:
        events = read_events(r)
    document_id = events[0]["id"]
    assert events[-2]["id"] == document_id
    assert client.get(f"/v1/documents/{document_id}/pictures/1", params={"format": "image"}).status_code == 200


def test_describe_pictures_through_a_vision_model(client: Any) -> None:
    answer = convert(client, testing.report_pdf(), "report.pdf", describe_pictures="eyes")
    assert answer["usage"]["pictures_described"] == 1
    page = answer["pages"][1]["markdown"]
    placeholder = page.index("<!-- image -->")
    assert "> **Picture:** " in page[placeholder:]
    # the model's configured describer (docling-small names `eyes`) is used when the request names none
    small = convert(client, testing.report_pdf(), "report.pdf", model="docling-small")
    assert small["usage"]["pictures_described"] == 1
    unknown = client.post(
        "/v1/documents/convert",
        data={"model": "docling", "describe_pictures": "nobody"},
        files={"file": ("r.pdf", testing.report_pdf())},
    )
    assert unknown.status_code == 404


SLOW_STAGING = """
[[models]]
id = "slow"
modality = "embeddings"
engine = "fake"
initial_tier = "tier1_gpu_vram"

[models.fake]
load_ms = 10000.0
"""


@pytest.fixture(scope="module")
def second_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A server whose pictures live 1 s, which may fetch loopback URLs, and whose staging takes 10 s."""
    from hypnos_server.testing import live_server

    folder = tmp_path_factory.mktemp("second")
    config = write_config(folder, ttl_secs=1, extra=SLOW_STAGING, limits="allow_private_urls = true\n")
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with live_server(config, ready_path="/health") as url, httpx.Client(base_url=url, headers=headers) as http:
        http.timeout = httpx.Timeout(300)
        yield http


def _wait_ready(http: httpx.Client) -> None:
    deadline = time.monotonic() + 120
    while http.get("/ready").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)


def test_picture_routes_are_open_during_staging(second_server: httpx.Client) -> None:
    assert second_server.get("/ready").status_code == 503  # still staging
    converting = second_server.post(
        "/v1/documents/convert", data={"model": "docling"}, files={"file": ("a.md", b"# x")}
    )
    assert converting.status_code == 503 and converting.json()["error"]["type"] == "model_not_available"
    listing = second_server.get("/v1/documents/doc-unknown/pictures")
    assert listing.status_code == 404 and listing.json()["error"]["type"] == "not_found"
    assert second_server.delete("/v1/documents/doc-unknown").status_code == 404


def test_pictures_expire(second_server: httpx.Client) -> None:
    _wait_ready(second_server)
    answer = convert(second_server, testing.report_pdf(), "report.pdf", return_pictures="true")
    url = f"/v1/documents/{answer['id']}/pictures"
    deadline = time.monotonic() + 30
    while second_server.get(url).status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    expired = second_server.get(url)
    assert expired.status_code == 404 and expired.json()["error"]["type"] == "not_found"


def test_a_document_fetched_from_a_url(second_server: httpx.Client) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    document = testing.report_pdf()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/pdf")
            self.send_header("Content-Length", str(len(document)))
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, *args: Any) -> None:
            return

    origin = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    try:
        _wait_ready(second_server)
        url = f"http://127.0.0.1:{origin.server_address[1]}/files/report.pdf"
        response = second_server.post("/v1/documents/convert", json={"model": "docling", "url": url})
    finally:
        origin.shutdown()
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["filename"] == "report.pdf" and "## Chapter 2: Results" in answer["markdown"]
