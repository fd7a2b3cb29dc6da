"""Fixtures of the fuzz session: one real `hypnos serve` (granian), over fake engines or the starter models."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypnos_server.testing import live_server

sys.path.insert(0, str(Path(__file__).parent))

from fuzz_kit import API_KEY, CONFIG, FAKE_SERVED, STARTER_LIMITS, USER_KEY_TABLE, Tally

# The second pass: the python of an environment with the engine plugins and their starter weights (the noxfile sets
# it when the llama plugin's test venv exists); the server then serves the starter lineup instead of fake engines.
STARTER_PYTHON = os.environ.get("HYPNOS_FUZZ_SERVER_PYTHON")
TALLY = pytest.StashKey[Tally]()
SERVED = pytest.StashKey[dict[str, str]]()
CLI = "import sys; from hypnos_server.cli import main; sys.exit(main())"


def _starter_config(python: str, folder: Path) -> tuple[str, dict[str, str]]:
    """The starter lineup's config (with small limits) and a served model id per modality."""
    out = folder / "starter.toml"
    subprocess.run([python, "-c", CLI, "starter", "--models-dir", str(folder / "models"), "--out", str(out)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    text = out.read_text()
    served: dict[str, str] = {}
    for model in tomllib.loads(text).get("models", []):
        for modality in [model["modality"], *model.get("modalities", [])]:
            served.setdefault(modality, model["id"])
    return text + STARTER_LIMITS, served


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    """The base URL of a real server: fake models for every modality (or the starter lineup), small limits, one key."""
    folder = tmp_path_factory.mktemp("fuzz")
    config = folder / "hypnos.toml"
    env = {"HYPNOS_API_KEYS": API_KEY}
    if STARTER_PYTHON:
        text, served = _starter_config(STARTER_PYTHON, folder)
    else:
        text, served = CONFIG, FAKE_SERVED
        env["HYPNOS_PLUGINS"] = "fake"
    config.write_text(text + USER_KEY_TABLE)
    request.config.stash[SERVED] = served
    with live_server(config, env=env, ready_timeout=300, python=STARTER_PYTHON) as base:
        yield base


@pytest.fixture(scope="session")
def served(server: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """A model id the server serves, per modality."""
    return request.config.stash[SERVED]


@pytest.fixture(scope="session")
def tally(request: pytest.FixtureRequest) -> Tally:
    """Counts of cases tried and problems found, printed in the terminal summary."""
    return request.config.stash.setdefault(TALLY, Tally())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The fuzz counts: cases tried and answers of 500 and above, per source."""
    if TALLY in config.stash:
        lineup = "starter models" if STARTER_PYTHON else "fake engines"
        terminalreporter.write_line(f"[fuzz] {lineup}: {config.stash[TALLY].summary()}")
