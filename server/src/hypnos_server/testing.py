"""Test and bench kit: run the real `hypnos serve` (granian) in a subprocess on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def live_server(
    config_path: Path,
    *,
    port: int | None = None,
    ready_timeout: float = 120.0,
    env: dict[str, str] | None = None,
    ready_path: str = "/ready",
    python: str | None = None,
) -> Iterator[str]:
    """Run `hypnos serve --config config_path` and yield its base URL once `ready_path` answers 200.

    granian prints "Listening" before its worker answers, so readiness is polled over HTTP. The server's output
    goes to `<config>.log`; it is terminated (then killed) on exit. `python` runs the server from another environment
    (default: this interpreter).
    """
    with live_process(
        config_path, port=port, ready_timeout=ready_timeout, env=env, ready_path=ready_path, python=python
    ) as (_, base):
        yield base


@contextlib.contextmanager
def live_process(
    config_path: Path,
    *,
    port: int | None = None,
    ready_timeout: float = 120.0,
    env: dict[str, str] | None = None,
    ready_path: str = "/ready",
    python: str | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """live_server that also yields the process (a test may kill it); stopped on exit unless it already ended."""
    import httpx

    port = port or free_port()
    code = "import sys; from hypnos_server.cli import main; sys.exit(main())"
    command = [python or sys.executable, "-c", code, "serve", "--config", str(config_path), "--port", str(port)]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    environment.pop("HYPNOS_CONFIG", None)
    log_path = config_path.with_suffix(".log")
    base = f"http://127.0.0.1:{port}"
    with log_path.open("ab") as log:
        # its own session: a test can kill granian's whole process group (the worker serves the requests)
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
        try:
            deadline = time.monotonic() + ready_timeout
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the server exited with {process.returncode}: {log_path.read_text()[-2000:]}")
                try:
                    if httpx.get(f"{base}{ready_path}", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server was not ready in {ready_timeout} s: {log_path.read_text()[-2000:]}")
                time.sleep(0.1)
            yield process, base
        finally:
            if process.poll() is None:
                stop_process(process)


@contextlib.contextmanager
def raw_post(base: str, path: str, body: bytes) -> Iterator[socket.socket]:
    """POST a JSON body over a plain socket and hold the connection open; leaving the block hangs up."""
    from urllib.parse import urlsplit

    address = urlsplit(base)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((address.hostname or "127.0.0.1", address.port or 80)) as sock:
        sock.sendall(head + body)
        yield sock


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """Terminate a server process we started, killing it when it does not exit within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
