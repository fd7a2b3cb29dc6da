"""Engine host processes under the real `hypnos serve`: none is left after SIGTERM or SIGKILL of the server, and a
model whose host keeps crashing stops restarting at max_crashes until an admin enables it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypnos.testing.hosts import alive, engine_hosts, host_pid, status_entry, wait_until
from hypnos_server.testing import live_process

CONFIG = """
[server]
isolation = "process"
shutdown_grace_secs = 5

[[models]]
id = "chat"
modality = "text_generation"
engine = "fake"
fake = { layers = 2, layer_bytes = 1048576, tokens = 6 }

[[models]]
id = "embed"
modality = "embeddings"
engine = "fake"
fake = { layers = 2, layer_bytes = 1048576 }

[[models]]
id = "crashy"
modality = "text_generation"
engine = "fake"
fake = { layers = 2, layer_bytes = 1048576, tokens = 6, crash_after_tokens = 1 }
process = { max_crashes = 2 }
"""
MARK = "HYPNOS_TEST_SERVER_RUN"  # in the server's environment, so in its hosts': found even once they are orphans


def chat(base: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)


@contextlib.contextmanager
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, tuple[str, str]]]:
    """The real server over the fake plugin, its environment marked; hosts it leaves behind are killed afterwards."""
    config = tmp_path / "hypnos.toml"
    config.write_text(CONFIG)
    marker = (MARK, uuid.uuid4().hex)
    env = {"HYPNOS_PLUGINS": "fake", marker[0]: marker[1]}
    try:
        with live_process(config, env=env, ready_timeout=60, ready_path="/health") as (process, base):
            yield process, base, marker
    finally:
        for pid in engine_hosts(marker=marker):  # a failed test must not leave its orphans running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start_hosts(process: subprocess.Popen[bytes], base: str, marker: tuple[str, str]) -> dict[int, str]:
    """Serve one request on each healthy model; their hosts, checked against the status and the process tree."""
    assert chat(base, "chat").status_code == 200
    embedded = httpx.post(f"{base}/v1/embeddings", json={"model": "embed", "input": "hello"}, timeout=60)
    assert embedded.status_code == 200
    hosts = engine_hosts(marker=marker)
    assert sorted(hosts.values()) == ["chat", "embed"]
    assert engine_hosts(under=process.pid) == hosts  # children of the server's worker
    assert {host_pid(base, "chat"), host_pid(base, "embed")} == set(hosts)
    return hosts


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_no_engine_host_outlives_the_server(tmp_path: Path, how: signal.Signals) -> None:
    with server(tmp_path) as (process, base, marker):
        hosts = start_hosts(process, base, marker)
        process.send_signal(how)  # the server's main process only: its worker and hosts must follow on their own
        process.wait(timeout=30)
        assert wait_until(lambda: not engine_hosts(marker=marker), 10), engine_hosts(marker=marker)
        assert not any(alive(pid) for pid in hosts)


def test_a_crash_loop_stops_at_max_crashes_until_an_admin_enables_the_model(tmp_path: Path) -> None:
    with server(tmp_path) as (_process, base, marker):
        for _ in range(2):  # max_crashes = 2: each request starts a host, which dies after its first token
            crashed = chat(base, "crashy")
            assert crashed.status_code == 500
            assert crashed.json()["error"]["type"] == "server_error" and "SIGKILL" in crashed.json()["error"]["message"]
        entry = status_entry(base, "crashy")
        assert entry["engine_process"] is None and "quarantined after 2 crashes" in entry["unavailable_reason"]

        refused = chat(base, "crashy")  # no third host
        assert refused.status_code == 503 and "enable" in refused.json()["error"]["message"]
        assert "crashy" not in engine_hosts(marker=marker).values()
        assert status_entry(base, "crashy")["engine_process"] is None
        assert chat(base, "chat").status_code == 200  # the other models serve on

        assert httpx.post(f"{base}/v1/models/crashy/enable", timeout=30).status_code == 200
        again = chat(base, "crashy")  # a new host starts (and crashes: the fault is in the model)
        assert again.status_code == 500 and "SIGKILL" in again.json()["error"]["message"]
        entry = status_entry(base, "crashy")
        assert entry["engine_restarts"] == 2 and "quarantined" not in entry["unavailable_reason"]
