"""Fixtures: the tiny random GLiNER (torch weights and ONNX export) built once, and a real server serving it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

API_KEY = "gliner-test-key"
LIMITED_KEY = "gliner-limited-key"


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder holding `gliner-tiny` (model.safetensors and model.onnx side by side)."""
    from hypnos_gliner.testing import TINY_NAME, build_tiny_gliner

    folder = tmp_path_factory.mktemp("models")
    build_tiny_gliner(folder / TINY_NAME)
    return folder


@pytest.fixture(scope="session")
def reference(models_dir: Path):  # type: ignore[no-untyped-def]
    """GLiNER itself, in this process, on the same folder (torch): what one pass gives."""
    from gliner import GLiNER

    return GLiNER.from_pretrained(str(models_dir / "gliner-tiny"), local_files_only=True)


def server_config(models_dir: Path) -> str:
    """Two models on the same folder (ONNX Runtime and torch), API keys, one of them limited to 1 request/minute."""
    models = "".join(
        f'\n[[models]]\nid = "gliner-{runtime}"\nmodality = "entity_extraction"\nengine = "gliner"\n'
        f'weights_path = "gliner-tiny"\nslots = 8\n\n[models.gliner]\nruntime = "{runtime}"\n'
        for runtime in ("onnx", "torch")
    )
    return (
        f'models_dir = "{models_dir}"\n\n[server]\napi_keys = ["{API_KEY}"]\n\n'
        f'[[server.keys]]\nkey = "{LIMITED_KEY}"\nrequests_per_minute = 1\n\n'
        f"[limits]\nmax_queue_per_model = 64\n{models}"
    )


@pytest.fixture(scope="session")
def base_url(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `hypnos serve` (granian) serving the tiny model; its base URL."""
    from hypnos_server.testing import live_server

    config = tmp_path_factory.mktemp("server") / "hypnos.toml"
    config.write_text(server_config(models_dir), encoding="utf-8")
    with live_server(config) as url:
        yield url


@pytest.fixture(scope="session")
def client(base_url: str) -> Iterator[object]:
    """An httpx client with the API key."""
    import httpx

    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120) as http:
        yield http


@pytest.fixture(scope="session")
def limited_key() -> str:
    """A key the server allows one request per minute."""
    return LIMITED_KEY
