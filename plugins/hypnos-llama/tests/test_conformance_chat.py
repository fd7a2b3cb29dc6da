"""The engine conformance suite (hypnos.testing.conformance) for ggml_llama chat on the tiny random-weight GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import CancelToken, EngineContext
from hypnos.testing.conformance import ConformanceTarget, MissingLibrary
from hypnos_llama import plugin
from hypnos_llama.testing import chat_request


async def _chat(engine, cancel: CancelToken) -> list:  # type: ignore[no-untyped-def]
    stream = engine.chat(chat_request("Tell me a story about a fox.", temperature=0.0, max_tokens=12), cancel)
    return [event async for event in stream]


@pytest.fixture
def conformance_engine(tiny_gguf: Path) -> ConformanceTarget:
    """The tiny llama (one slot, 1024 cells) through the ggml_llama kind."""
    (kind,) = plugin.hypnos_engine_kinds()
    model = ModelConfig(id="tiny", modality="text_generation", engine="ggml_llama", weights_path=str(tiny_gguf),
                        slots=1, context_len=1024, engine_options={"llama": {"n_threads": 1}})  # fmt: skip
    context = EngineContext(models_dir=tiny_gguf.parent, limits=LimitsConfig())
    missing = MissingLibrary("llama-cpp-python", modules=("llama_cpp",))
    return ConformanceTarget(kind, model, context, _chat, missing_library=missing)
