"""A real hang-up against the real server (granian): the socket closed mid-request cancels the work (section 17)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypnos_server.testing import live_server, raw_post

CONFIG = """
[[models]]
id = "slow-embed"
modality = "embeddings"
engine = "fake"
[models.fake]
token_ms = 50
steps = 1
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("hangup") / "hypnos.toml"
    path.write_text(CONFIG)
    with live_server(path) as base:
        yield base


def active_leases(base: str) -> int:
    models = httpx.get(f"{base}/v1/memory/status", timeout=10).json()["models"]
    return int(next(m for m in models if m["id"] == "slow-embed")["active_leases"])


def wait_for_leases(base: str, count: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if active_leases(base) == count:
            return True
        time.sleep(0.05)
    return False


def test_closing_the_socket_on_embeddings_cancels_the_work_and_frees_the_model(server: str) -> None:
    body = json.dumps({"model": "slow-embed", "input": [f"text {i}" for i in range(1200)]}).encode()  # 60 s of work
    with raw_post(server, "/v1/embeddings", body):
        assert wait_for_leases(server, 1, 30)
    # the socket is closed: the lease must go back long before the 60 s the work would take
    assert wait_for_leases(server, 0, 20)
    answer = httpx.post(f"{server}/v1/embeddings", json={"model": "slow-embed", "input": "one"}, timeout=20)
    assert answer.status_code == 200
    assert len(answer.json()["data"]) == 1
