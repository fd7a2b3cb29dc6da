"""Fixtures: a real `hypnos serve` with two docling models and a fake vision model, behind an API key."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest_plugins = ["hypnos.testing.conformance"]

API_KEY = "docling-test-key"
OTHER_KEY = "docling-other-key"  # a second tenant (no admin)
MAX_DOCUMENT_BYTES = 1024 * 1024
SMALL_MAX_PAGES = 4

MODELS = f"""
[[models]]
id = "docling"
modality = "document_conversion"
engine = "docling"
initial_tier = "tier1_gpu_vram"

[models.docling]
threads = 2

[[models]]
id = "docling-small"
modality = "document_conversion"
engine = "docling"

[models.docling]
max_pages = {SMALL_MAX_PAGES}
describe_model = "eyes"

[[models]]
id = "docling-layout"
modality = "document_conversion"
engine = "docling"
weights_path = "layout"

[[models]]
id = "docling-standard"
modality = "document_conversion"
engine = "docling"

[models.docling]
pipeline = "standard"
artifacts_path = "docling-artifacts"

[[models]]
id = "docling-own-layout"
modality = "document_conversion"
engine = "docling"
weights_path = "layout"

[models.docling]
pipeline = "layout"

[[models]]
id = "eyes"
modality = "text_generation"
modalities = ["vision"]
engine = "fake"
"""


def write_config(folder: Path, *, ttl_secs: int = 3600, extra: str = "", limits: str = "") -> Path:
    """A config serving the models above with an admin and a user key, a 1 MiB document limit and the picture TTL."""
    (folder / "models" / "layout" / "docling-project--docling-layout-heron").mkdir(parents=True, exist_ok=True)
    config = folder / "hypnos.toml"
    config.write_text(
        f'models_dir = "{folder / "models"}"\n\n[server]\napi_keys = ["{API_KEY}"]\n'
        f'keys = [{{ key = "{OTHER_KEY}", label = "other" }}]\n'
        f"document_pictures_ttl_secs = {ttl_secs}\n\n[limits]\nmax_document_bytes = {MAX_DOCUMENT_BYTES}\n"
        f"{limits}{MODELS}{extra}",
        encoding="utf-8",
    )
    return config


@pytest.fixture(scope="session")
def server_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session server's config file (its output goes to the `.log` file beside it)."""
    return write_config(tmp_path_factory.mktemp("server"))


@pytest.fixture(scope="session")
def base_url(server_config: Path) -> Iterator[str]:
    """A real `hypnos serve` (granian); its base URL."""
    from hypnos_server.testing import live_server

    with live_server(server_config) as url:
        yield url


@pytest.fixture(scope="session")
def client(base_url: str) -> Iterator[object]:
    """An httpx client with the API key."""
    import httpx

    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=300) as http:
        yield http
