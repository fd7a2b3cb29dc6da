"""Real processes: granian's worker dies with its main process; a second `hypnos serve` refuses a held port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypnos_server.testing import free_port, live_server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

CONFIG = """
[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"
"""
SERVE = "import sys; from hypnos_server.cli import main; sys.exit(main())"


def children(pid: int) -> list[int]:
    """Direct children of a process, from /proc."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:  # threads come and go while we read
            found.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def serving_on(pid: int, port: str) -> bool:
    """True when the process runs `serve ... --port port`."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in arguments and port.encode() in arguments


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_until(predicate, seconds: float = 30.0) -> bool:
    """Poll until predicate() holds (a liveness bound, not a speed check)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "hypnos.toml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def server(config_path: Path) -> Iterator[tuple[str, int]]:
    """A live server and the pid of granian's main process (the test's only child running `serve`)."""
    with live_server(config_path, env={"HYPNOS_PLUGINS": "fake"}, ready_timeout=60) as base:
        port = base.rsplit(":", 1)[1]
        (main,) = [child for child in children(os.getpid()) if serving_on(child, port)]
        yield base, main


def test_the_worker_dies_with_a_killed_main_process(server):
    base, main = server
    workers = children(main)
    assert workers, "granian runs the app in a worker process"
    os.kill(main, signal.SIGKILL)
    assert wait_until(lambda: not any(alive(worker) for worker in workers)), "the worker outlived its main process"
    port = int(base.rsplit(":", 1)[1])
    with socket.socket() as probe:  # nobody holds the port any more
        assert wait_until(lambda: probe.connect_ex(("127.0.0.1", port)) != 0)


def test_a_second_serve_on_a_held_port_refuses_to_start(server, config_path):
    base, _ = server
    port = base.rsplit(":", 1)[1]
    command = [sys.executable, "-c", SERVE, "serve", "--config", str(config_path), "--port", port]
    env = {**os.environ, "HYPNOS_PLUGINS": "fake", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port} is already in use by a running Hypnos" in lines[0]


def test_a_port_another_program_holds_is_refused_too(config_path):
    port = free_port()
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as granian binds: must not be shared
        holder.bind(("127.0.0.1", port))
        holder.listen()
        command = [sys.executable, "-c", SERVE, "serve", "--config", str(config_path), "--port", str(port)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ})
    assert done.returncode != 0
    assert f"127.0.0.1:{port} is already in use by another program" in done.stderr
