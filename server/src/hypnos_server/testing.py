"""Test and bench kit: run the real `hypnos serve` (granian) in a subprocess on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

README_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
PLUGIN_MARK = "# plugin: "  # the first line of a README example that only a plugin's tests can run


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


def node_sdk(node_dir: Path) -> Path:
    """`node_dir` (the repository's tests/node) with its pinned npm `openai` installed; raises without node or npm."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise RuntimeError("the Node SDK tests need node and npm on PATH")
    if not (node_dir / "node_modules" / "openai").is_dir() or not (node_dir / "package-lock.json").exists():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=node_dir, check=True, timeout=300)
    return node_dir


def node_call(method: str, *args: Any, file: tuple[str, Path] | None = None, binary: bool = False) -> dict[str, Any]:
    """One call for node_sdk_calls: the SDK method ("chat.completions.create") and its arguments; `file` (name, path)
    becomes the first argument's `file` (an upload), `binary` returns the body as base64."""
    call: dict[str, Any] = {"method": method, "args": list(args), "binary": binary}
    if file is not None:
        call["file"] = {"name": file[0], "path": str(file[1])}
    return call


def node_sdk_calls(
    node_dir: Path, base: str, calls: list[dict[str, Any]], *, api_key: str = "unused", timeout: float = 1200
) -> list[dict[str, Any]]:
    """Make `calls` (node_call) in order with the OpenAI Node SDK against `base`, through node_dir's sdk.mjs: one
    result per call, {"value": what the SDK returned (a stream: its chunks)} or {"error": what it threw}."""
    payload = json.dumps({"baseURL": f"{base}/v1", "apiKey": api_key, "calls": calls})
    run = subprocess.run(
        ["node", "sdk.mjs"], cwd=node_dir, input=payload, capture_output=True, text=True, timeout=timeout
    )
    if run.returncode != 0:
        raise RuntimeError(f"sdk.mjs exited with {run.returncode}: {run.stderr[-2000:]}")
    results: list[dict[str, Any]] = json.loads(run.stdout)
    return results


def readme_blocks(readme: Path, language: str, plugin: str = "") -> list[str]:
    """The README's ```language blocks whose first line is `# plugin: <plugin>` (for "": the unmarked ones)."""
    blocks = [body for lang, body in README_BLOCK.findall(readme.read_text(encoding="utf-8")) if lang == language]
    first_lines = [body.partition("\n")[0] for body in blocks]
    marks = [line.removeprefix(PLUGIN_MARK) if line.startswith(PLUGIN_MARK) else "" for line in first_lines]
    return [body for body, mark in zip(blocks, marks, strict=True) if mark == plugin]


def run_readme_example(
    body: str, language: str, base: str, cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run one README example against `base` in `cwd`: bash with curl failing on an error status, or python."""
    if language == "bash":
        script = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n' + body
        command = ["bash", "-c", script.replace("localhost:9999", base)]
    else:
        command = [sys.executable, "-c", body.replace("http://127.0.0.1:9999", base)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def readme_example_output(readme: Path, language: str, plugin: str, base: str, cwd: Path) -> str:
    """The stdout of the README's one `language` example marked for `plugin`, run against `base`; raises if it fails."""
    [body] = readme_blocks(readme, language, plugin)
    done = run_readme_example(body, language, base, cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{body}\nexited with {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done.stdout
