"""The agents session's fixtures: a real server on the starter lineup (request log at trace), the pinned Node, a
folder holding hello.txt with a word nobody can guess, and the request log every check reads."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from agents_kit import HERE, NODE_BIN, RequestLog, Served


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`hypnos starter`'s config (the installed plugins' starter models) served by `hypnos serve`, the request log
    at trace and large enough for a whole agent task."""
    from hypnos.tomlw import dumps
    from hypnos_server.testing import live_server

    models_dir = Path(os.environ.get("HYPNOS_TEST_MODELS_DIR") or Path(tempfile.gettempdir()) / "hypnos-starter-models")
    config = tmp_path_factory.mktemp("agents-server") / "hypnos.toml"
    code = "import sys; from hypnos_server.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", code, "starter", "--models-dir", str(models_dir), "--out", str(config)]
    subprocess.run(command, check=True, timeout=900)
    settings = tomllib.loads(config.read_text())
    chat = [m["id"] for m in settings["models"] if m.get("modality") == "text_generation"]
    assert chat, f"the starter lineup has no chat model: {settings['models']}"
    settings["server"] = {**settings.get("server", {}), "request_log_level": "trace", "request_log_capacity": 1000}
    config.write_text(dumps(settings))
    port = int(os.environ["HYPNOS_AGENTS_PORT"]) if os.environ.get("HYPNOS_AGENTS_PORT") else None
    with live_server(config, port=port, ready_timeout=900) as base:
        yield Served(base, chat[0])


@pytest.fixture
def request_log(served: Served) -> RequestLog:
    """The request log, cleared."""
    log = RequestLog(served.base)
    log.clear()
    return log


@pytest.fixture
def workdir(tmp_path: Path) -> tuple[Path, str]:
    """A folder holding hello.txt with a fresh word in it (the answer can only hold it if a tool read the file)."""
    word = f"zephyr{secrets.token_hex(3)}"
    (tmp_path / "hello.txt").write_text(f"The secret word is {word}.\n")
    return tmp_path, word


@pytest.fixture(scope="session")
def node_env() -> dict[str, str]:
    """The environment a Node client runs in: the pinned Node 22 first on PATH (fails when `npm install` in
    tests/agents did not run: `nox -s agents` runs it)."""
    if not (NODE_BIN / "node").exists():
        raise RuntimeError(f"no {NODE_BIN / 'node'}: run `npm install` in {HERE} (nox -s agents does)")
    return {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
