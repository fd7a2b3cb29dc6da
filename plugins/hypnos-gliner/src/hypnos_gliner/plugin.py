"""The `gliner` entry point: the engine kind and the POST /v1/entities route; cheap to import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.config import ModelConfig
from hypnos.engine import Engine, EngineContext, EngineKind
from hypnos.hookspecs import hookimpl
from hypnos.kit.batching import BATCHING_OPTIONS
from hypnos.types import Modality

GLINER_KIND = "gliner"


def make_gliner_engine(model: ModelConfig, context: EngineContext) -> Engine:
    """A GLiNER engine for the model folder at weights_path (torch, or ONNX Runtime where model.onnx is there)."""
    from hypnos_gliner.engine import GlinerEngine

    return GlinerEngine(model, context)


@hookimpl
def hypnos_engine_kinds() -> list[EngineKind]:
    """GLiNER zero-shot entity extraction."""
    from hypnos_gliner.engine import GlinerOptions

    return [
        EngineKind(
            GLINER_KIND,
            frozenset({Modality.ENTITY_EXTRACTION}),
            make_gliner_engine,
            description="GLiNER zero-shot entity extraction on torch or ONNX Runtime",
            options={"gliner": GlinerOptions, **BATCHING_OPTIONS},
            # torch's OpenMP threads spin briefly (~30 us) between the small model's many parallel regions, then
            # sleep: a text took 3.6-3.8 ms quiet against 7.0-7.4 with OMP_WAIT_POLICY=PASSIVE, and as long as PASSIVE
            # beside two busy cores (52 ms at nice 10), where the default 3 ms spin cost 92 ms vs 24 (#17)
            process_env={"GOMP_SPINCOUNT": "3000"},
            # a batch engine: a chat decoding beside busy torch threads on 2 cores ran 39-46 tok/s with this, 26 without
            # (bench isolation's "decode beside busy GLiNER"); GLiNER still has every core the others leave idle
            process_nice=10,
        )
    ]


@hookimpl
def hypnos_routes() -> list[Any]:
    """POST /v1/entities."""
    from hypnos_gliner.route import ROUTES

    return list(ROUTES)


@hookimpl
def hypnos_starter_models(models_dir: Path) -> list[dict[str, Any]]:
    """The tiny local GLiNER when `python -m hypnos_gliner.testing MODELS_DIR` (./run.sh --with entities) wrote it."""
    from hypnos_gliner.testing import TINY_NAME, model_table

    if not (Path(models_dir) / TINY_NAME / "model.safetensors").is_file():
        return []
    return [model_table()]
