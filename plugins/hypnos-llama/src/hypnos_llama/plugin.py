"""The hypnos-llama plugin's hooks; cheap to import (llama_cpp loads only when a model does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.engine import EngineContext, EngineKind
from hypnos.gguf_arch import gguf_architecture
from hypnos.hookspecs import hookimpl
from hypnos.kit.batching import BATCHING_OPTIONS
from hypnos.types import Modality

from hypnos_llama.options import LlamaOptions


def _make_engine(model: Any, context: EngineContext) -> Any:
    """Build the engine for the model's primary modality (imported on first use)."""
    if model.modality == Modality.EMBEDDINGS:
        from hypnos_llama.embedding.engine import LlamaEmbeddingEngine

        return LlamaEmbeddingEngine(model, context)
    from hypnos_llama.engine import LlamaEngine

    return LlamaEngine(model, context)


@hookimpl
def hypnos_engine_kinds() -> list[EngineKind]:
    """The ggml_llama engine kind."""
    return [
        EngineKind(
            name="ggml_llama",
            # vision and speech_to_text need a projector (aux_path); a model advertises what its projector takes
            modalities=frozenset(
                {Modality.TEXT_GENERATION, Modality.EMBEDDINGS, Modality.VISION, Modality.SPEECH_TO_TEXT}
            ),
            factory=_make_engine,
            # [models.batching]: how embedding models batch concurrent requests (chat models batch in their slots)
            options={"llama": LlamaOptions, **BATCHING_OPTIONS},
            description="GGUF models on llama.cpp: chat with slots and continuous batching (images and audio through "
            "a projector), and embeddings",
            # the pool API and the catalog check a GGUF's general.architecture against the catalog's tested ones
            architecture_of=gguf_architecture,
            hang_secs=60.0,  # the batch loop reports progress per decode step and prefill chunk (seconds at most)
        )
    ]


@hookimpl
def hypnos_starter_models(models_dir: Path) -> list[dict[str, Any]]:
    """The Qwen2.5-Coder-0.5B chat and all-MiniLM-L6-v2 embedding starters, when their packages are installed."""
    from hypnos_llama.embedding.starter import embedding_starter_models
    from hypnos_llama.starter import starter_models

    return [*starter_models(models_dir), *embedding_starter_models(models_dir)]


@hookimpl
def hypnos_describe_model_files(path: Path) -> dict[str, Any] | None:
    """A GGUF file (or a folder holding one and maybe its projector): block defaults and facts from its metadata."""
    from hypnos_llama.describe import describe

    return describe(path)
