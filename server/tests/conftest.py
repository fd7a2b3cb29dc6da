"""Fixtures of the server tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

sys.path.insert(0, str(Path(__file__).parent))

from hypnos_server.app import HypnosApp
from server_kit import build_app, wait_ready


@pytest.fixture
def client() -> Iterator[TestClient[HypnosApp]]:
    """A ready client over the kit's default lineup, no keys."""
    with TestClient(build_app()) as test_client:
        wait_ready(test_client)
        yield test_client
