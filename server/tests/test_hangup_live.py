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
[limits]
max_queue_per_model = 1

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


def model_status(base: str, field: str) -> int:
    models = httpx.get(f"{base}/v1/memory/status", timeout=10).json()["models"]
    return int(next(m for m in models if m["id"] == "slow-embed")[field])


def wait_for_leases(base: str, count: int, seconds: float, field: str = "active_leases") -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if model_status(base, field) == count:
            return True
        time.sleep(0.05)
    return False


def embed(inputs: int) -> bytes:
    """An embeddings body whose work takes 50 ms an input."""
    return json.dumps({"model": "slow-embed", "input": [f"text {i}" for i in range(inputs)]}).encode()


def test_closing_the_socket_on_embeddings_cancels_the_work_and_frees_the_model(server: str) -> None:
    with raw_post(server, "/v1/embeddings", embed(1200)):  # 60 s of work
        assert wait_for_leases(server, 1, 30)
    # the socket is closed: the lease must go back long before the 60 s the work would take
    assert wait_for_leases(server, 0, 20)
    answer = httpx.post(f"{server}/v1/embeddings", json={"model": "slow-embed", "input": "one"}, timeout=20)
    assert answer.status_code == 200
    assert len(answer.json()["data"]) == 1


def test_closing_the_socket_of_a_queued_request_frees_its_place_in_the_queue(server: str) -> None:
    with raw_post(server, "/v1/embeddings", embed(1200)) as busy:  # holds the only slot for 60 s
        assert wait_for_leases(server, 1, 30)
        with raw_post(server, "/v1/embeddings", embed(1)):
            assert wait_for_leases(server, 1, 30, "queued")
        # its socket is closed: it leaves the queue at once, long before the slot frees
        assert wait_for_leases(server, 0, 20, "queued")
        with raw_post(server, "/v1/embeddings", embed(1)) as following:
            assert wait_for_leases(server, 1, 30, "queued")  # in its place: the one that left is not counted
            busy.close()  # the slot passes on, and the following request is answered
            following.settimeout(30)
            assert following.recv(64).startswith(b"HTTP/1.1 200")
    assert wait_for_leases(server, 0, 20)
