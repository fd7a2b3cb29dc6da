"""A tiny embedding engine built on the kit: the worked example of core/README.md (and the conformance suite's own
test subject). Its "model" is a weights file; a vector mixes each input's CRC with the weights."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import msgspec

from hypnos.config import ModelConfig
from hypnos.engine import (
    CancelToken,
    EmbeddingResult,
    EngineContext,
    EngineKind,
    MemoryEstimate,
    missing_library,
)
from hypnos.kit.staged import StagedEngine, check_cancelled
from hypnos.types import LayerPlacementPlan, Modality


class ExampleOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.example]` table."""

    dim: int = 8
    workspace_bytes: int = 1024 * 1024


class ExampleEngine(StagedEngine):
    """Tier 2 = the weights file's bytes in RAM; tier 1 = a built "model" (a view per dimension)."""

    options_table = "example"
    options_type = ExampleOptions

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options: ExampleOptions
        self.path = self.model_path()
        self._weights: bytes | None = None
        self._rows: list[memoryview] | None = None
        self._crc: Callable[[bytes], int] | None = None

    def estimate(self) -> MemoryEstimate:
        """The file's size (no layers: weight_bytes and non_layer_bytes count) and a small workspace."""
        size = self.path.stat().st_size
        return MemoryEstimate(weight_bytes=size, non_layer_bytes=size, workspace_bytes=self.options.workspace_bytes)

    def read_weights(self) -> None:
        """Tier 3 -> 2: the file's bytes in RAM."""
        self._weights = self.path.read_bytes()

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 2 -> 1: the runnable model, built from the RAM copy (the engine library loads here, lazily)."""
        try:
            import zlib  # stands in for the engine library (torch, llama_cpp...)
        except ImportError as error:
            raise missing_library("zlib") from error
        assert self._weights is not None
        self._crc = zlib.crc32
        step = max(1, len(self._weights) // self.options.dim)
        self._rows = [memoryview(self._weights)[i * step : (i + 1) * step] for i in range(self.options.dim)]
        self.device = "cpu"

    def release_device(self) -> None:
        """Tier 1 -> 2: drop the model, keep the bytes."""
        self._rows = None

    def release_warm(self) -> None:
        """Tier 2 -> 3: drop the bytes."""
        self._weights = None

    async def embed(self, texts: list[str], cancel: CancelToken) -> EmbeddingResult:
        """One unit vector per text, computed on the model's worker thread."""
        self.require_ready()
        return await self.run_blocking(self._embed, texts, cancel)

    def _embed(self, texts: list[str], cancel: CancelToken) -> EmbeddingResult:
        vectors = []
        for text in texts:
            check_cancelled(cancel)  # one step per input: a cancelled request stops at the next input
            assert self._crc is not None
            seed = self._crc(text.encode())
            raw = [float(row[seed % len(row)] if len(row) else 0) + 1.0 for row in self._rows or []]
            norm = math.sqrt(sum(v * v for v in raw)) or 1.0
            vectors.append([v / norm for v in raw])
        return EmbeddingResult(vectors=vectors, prompt_tokens=sum(len(t.split()) for t in texts))


def example_engine_kind() -> EngineKind:
    """The `example` engine kind: embeddings, options in `[models.example]`."""
    return EngineKind(
        "example", frozenset({Modality.EMBEDDINGS}), ExampleEngine, options={"example": ExampleOptions},
        description="the kit's worked example", spec_kind="ggml_llama",
    )  # fmt: skip


def write_example_weights(path: Path, size: int = 4 * 1024 * 1024) -> Path:
    """A weights file for the example engine (deterministic bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(range(256)) * (size // 256))
    return path
