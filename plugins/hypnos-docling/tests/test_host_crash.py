"""kill -9 of the docling engine host while a conversion streams its pages: the stream ends with the spec's error
event and [DONE], and the next conversion starts a new host and is served."""

from __future__ import annotations

import json
from typing import Any

from hypnos.testing.hosts import kill_host, status_entry
from hypnos_docling import testing
from hypnos_docling.testing import convert

from .conftest import API_KEY

ADMIN = {"Authorization": f"Bearer {API_KEY}"}


def test_a_killed_host_ends_the_conversion_with_the_error_event_and_the_next_one_is_served(
    client: Any, base_url: str
) -> None:
    files = {"file": ("long.pdf", testing.long_pdf(30))}
    with client.stream("POST", "/v1/documents/convert", data={"model": "docling", "stream": "1"}, files=files) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        assert any('"document.page"' in line for line in lines)  # the conversion is under way
        pid = kill_host(base_url, "docling", ADMIN)
        rest = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
    events = [payload if payload == "[DONE]" else json.loads(payload) for payload in rest]
    assert events[-1] == "[DONE]"
    last = events[-2]
    assert last.get("object") != "document" and last["error"]["type"] == "server_error"
    assert "SIGKILL" in last["error"]["message"]
    entry = status_entry(base_url, "docling", ADMIN)
    assert "SIGKILL" in entry["unavailable_reason"] and entry["active_leases"] == 0

    answer = convert(client, testing.report_html(), "r.html")  # a new host
    assert "Web Report" in answer["markdown"]
    assert status_entry(base_url, "docling", ADMIN)["engine_process"]["pid"] != pid
