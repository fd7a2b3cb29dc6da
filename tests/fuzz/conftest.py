"""Fixtures of the fuzz session: one real `hypnos serve` (granian) over fake engines, with an API key."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypnos_server.testing import live_server

sys.path.insert(0, str(Path(__file__).parent))

from fuzz_kit import API_KEY, CONFIG, Tally


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a real server: fake models for every modality, small limits, one key."""
    config = tmp_path_factory.mktemp("fuzz") / "hypnos.toml"
    config.write_text(CONFIG)
    env = {"HYPNOS_API_KEYS": API_KEY, "HYPNOS_PLUGINS": "fake"}
    with live_server(config, env=env, ready_timeout=60) as base:
        yield base


TALLY = pytest.StashKey[Tally]()


@pytest.fixture(scope="session")
def tally(request: pytest.FixtureRequest) -> Tally:
    """Counts of cases tried and problems found, printed in the terminal summary."""
    return request.config.stash.setdefault(TALLY, Tally())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The fuzz counts: cases tried and answers of 500 and above, per source."""
    if TALLY in config.stash:
        terminalreporter.write_line(f"[fuzz] {config.stash[TALLY].summary()}")
