"""The worked example of core/README.md, a whole embeddings plugin on the kit: all-MiniLM-L6-v2 (a sentence-transformers
folder) on a numpy BERT; the kit checks the inputs and batches concurrent requests into `embed_batch` calls."""

from __future__ import annotations

import json
from typing import Any

from hypnos.engine import EngineKind, MemoryEstimate, missing_library
from hypnos.kit.batching import BATCHING_OPTIONS
from hypnos.kit.embedding import EmbeddingEngine
from hypnos.types import LayerPlacementPlan, Modality


class MiniLMEngine(EmbeddingEngine):
    """Tier 2: the weights in RAM (numpy arrays); tier 1: the tokenizer and the encoder ready."""

    def estimate(self) -> MemoryEstimate:
        weights = (self.model_path() / "model.safetensors").stat().st_size  # float32 on disk as in RAM
        return MemoryEstimate(weight_bytes=weights, workspace_bytes=64 << 20)  # and a batch's activations

    def read_weights(self) -> None:
        from safetensors.numpy import load_file

        self.weights = load_file(self.model_path() / "model.safetensors")

    def build(self, plan: LayerPlacementPlan) -> None:
        from hypnos.testing.numpy_bert import sentence_vectors

        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise missing_library("tokenizers") from None
        folder, self.encode = self.model_path(), sentence_vectors
        self.tokenizer: Any = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()  # the tokenizer.json pads and cuts; the kit refuses an input past max_tokens
        self.tokenizer.no_truncation()
        self.config = json.loads((folder / "config.json").read_text())
        self.max_tokens = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
        self.vocab_size = self.config["vocab_size"]

    def release_device(self) -> None:
        self.tokenizer = None

    def release_warm(self) -> None:
        self.weights = {}

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text).ids)  # [CLS] ... [SEP]

    def embed_batch(self, batch: list[list[int]]) -> Any:
        return self.encode(self.weights, self.config, batch)  # one unit vector per input, in one forward pass


def example_engine_kind() -> EngineKind:
    """The `minilm` engine kind: embeddings, batched as the model's `[models.batching]` says."""
    return EngineKind(
        "minilm", frozenset({Modality.EMBEDDINGS}), MiniLMEngine, options=BATCHING_OPTIONS, spec_kind="onnx_runtime"
    )
