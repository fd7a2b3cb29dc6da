"""A request body sent slowly against the real server (granian): 408 once it stalls, the connection and the key's
concurrency permits freed (limits.body_timeout_secs)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from hypnos_server.testing import live_server

CONFIG = """
[server]
keys = [{ key = "slow-key", label = "slow", max_concurrent = 2 }]

[limits]
body_timeout_secs = 1.0

[[models]]
id = "embed"
modality = "embeddings"
engine = "fake"
"""
AUTH = {"Authorization": "Bearer slow-key"}
PATIENCE_SECS = 60  # far above the 1 s bound: a server without it never answers within this


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("body-timeout") / "hypnos.toml"
    path.write_text(CONFIG)
    with live_server(path) as base:
        yield base


def stalled_post(base: str, stack: ExitStack) -> socket.socket:
    """Headers declaring 1000 bytes, then 9 of them, then nothing."""
    address = urlsplit(base)
    sock = stack.enter_context(socket.create_connection((address.hostname, address.port)))
    head = (
        f"POST /v1/embeddings HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
        "Authorization: Bearer slow-key\r\nContent-Length: 1000\r\n\r\n"
    )
    sock.sendall(head.encode() + b'{"model":')
    sock.settimeout(PATIENCE_SECS)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_stalled_body_is_408_and_the_connection_closed(server: str) -> None:
    with ExitStack() as stack:
        answer = read_all(stalled_post(server, stack))  # returns only because the server closed the connection
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert b"content-type: text/plain" in head.lower()
    assert b"body_timeout_secs" in body


def test_stalled_bodies_give_their_keys_permits_back(server: str) -> None:
    with ExitStack() as stack:
        sockets = [stalled_post(server, stack) for _ in range(2)]  # the key's two permits
        answers = [read_all(sock) for sock in sockets]
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers)
    embedded = httpx.post(f"{server}/v1/embeddings", json={"model": "embed", "input": "hi"}, headers=AUTH, timeout=30)
    assert embedded.status_code == 200, embedded.text


def test_a_body_trickling_below_the_minimum_rate_is_cut_and_its_permit_freed(server: str) -> None:
    """A byte every 0.3 s never stalls for body_timeout_secs, but averages far below min_body_bytes_per_sec."""
    with ExitStack() as stack:
        socks = [stalled_post(server, stack) for _ in range(2)]  # the key's two permits
        answers = [b"", b""]
        for _ in range(int(PATIENCE_SECS / 0.3)):
            for index, sock in enumerate(socks):
                if answers[index]:
                    continue
                try:
                    sock.sendall(b" ")
                    sock.settimeout(0.15)
                    first = sock.recv(65536)
                    sock.settimeout(PATIENCE_SECS)
                    answers[index] = first + read_all(sock) if first else b"closed"
                except TimeoutError:
                    continue
                except OSError:
                    answers[index] = b"closed"
            if all(answers):
                break
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers), answers
    assert b"min_body_bytes_per_sec" in answers[0]
    embedded = httpx.post(f"{server}/v1/embeddings", json={"model": "embed", "input": "hi"}, headers=AUTH, timeout=30)
    assert embedded.status_code == 200, embedded.text
