"""Embedding models (BERT-class GGUFs) on llama.cpp: many inputs per decode, pooling and normalization per the GGUF."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hypnos.engine import (
    CancelToken,
    EmbeddingInput,
    EmbeddingResult,
    EngineCapabilities,
    EngineContext,
    MemoryEstimate,
)
from hypnos.errors import HypnosError, invalid_request
from hypnos.kit.staged import ModelNotLoaded, StagedEngine, check_cancelled
from hypnos.kit.warm_pages import WarmPages
from hypnos.types import EngineTiming, LayerPlacementPlan

from hypnos_llama.embedding.convert_bert import MAX_SEQUENCE_KEY, NORMALIZE_KEY
from hypnos_llama.estimate import estimate_gguf
from hypnos_llama.gguf_meta import GgufFile, read_gguf
from hypnos_llama.options import LlamaOptions
from hypnos_llama.runtime import import_llama_cpp

logger = logging.getLogger(__name__)


def normalized(rows: Any) -> Any:
    """Each row scaled to unit length (an all-zero row stays zero)."""
    import numpy as np

    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


def float32_resolution(rows: Any) -> Any:
    """Rows rounded to 9 significant digits of their largest element: what float32 holds, and half the JSON."""
    import numpy as np

    out = np.empty_like(rows)
    for index, row in enumerate(rows):
        largest = float(np.abs(row).max(initial=0.0))
        decimals = 8 - int(np.floor(np.log10(largest))) if largest > 0 else 0
        np.round(row, decimals, out=out[index])
    return out


class EmbeddingBatcher:
    """Owns a llama.cpp embedding context; packs inputs into batches of up to n_batch tokens and n_seq_max sequences."""

    def __init__(self, path: Path, options: LlamaOptions, gguf: GgufFile, n_gpu_layers: int) -> None:
        lib = import_llama_cpp()
        self.lib = lib
        trained = int(gguf.arch_value("context_length", 512) or 512)
        self.max_tokens = int(gguf.metadata.get(MAX_SEQUENCE_KEY) or trained)
        self.normalize = bool(gguf.metadata.get(NORMALIZE_KEY, True))
        n_batch = max(options.n_batch, self.max_tokens)
        self.llama = lib.Llama(
            str(path),
            embedding=True,
            n_ctx=n_batch,
            n_batch=n_batch,
            n_ubatch=n_batch,
            n_gpu_layers=n_gpu_layers,
            # Flash attention skips the masked cells, so packing many inputs into one decode costs no n_tokens^2.
            flash_attn=True if options.flash_attn is None else options.flash_attn,
            n_threads=options.threads(),
            n_threads_batch=options.batch_threads(),
            use_mmap=options.use_mmap,
            verbose=options.verbose,
        )
        self.n_batch = n_batch
        self.pack_tokens = max(1, min(options.embedding_batch_tokens, n_batch))
        self.n_seq_max = int(self.llama.context_params.n_seq_max)
        self.n_embd = int(self.llama.n_embd())
        self.sep = int(lib.llama_vocab_sep(self.llama._model.vocab)) if hasattr(lib, "llama_vocab_sep") else -1

    def close(self) -> None:
        """Free the context and model."""
        self.llama.close()

    def tokens(self, text: EmbeddingInput, index: int = 0) -> list[int]:
        """Tokens of one input (a text, or token ids checked against the vocabulary); 400 when longer than the
        model's sequence length (never cut silently)."""
        if isinstance(text, str):
            tokens = self.llama.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        else:
            vocab = self.llama.n_vocab()
            if any(not 0 <= token < vocab for token in text):
                raise invalid_request(f"`input[{index}]` holds a token id outside the vocabulary (0..{vocab - 1})")
            tokens = list(text)
        if len(tokens) > self.max_tokens:
            raise HypnosError(
                400,
                "invalid_request_error",
                f"`input[{index}]` has {len(tokens)} tokens; the model takes at most {self.max_tokens}",
                code="context_length_exceeded",
            )
        return tokens

    def embed(self, texts: list[EmbeddingInput], cancel: CancelToken) -> tuple[list[list[float]], int, int]:
        """Vectors in input order, the prompt token count and how many decodes it took."""
        import numpy as np

        llama, lib = self.llama, self.lib
        vectors: list[list[float]] = []
        total = 0
        decodes = 0
        pending: list[int] = []
        used = 0

        def flush() -> None:
            nonlocal decodes, used
            if not pending:
                return
            llama._ctx.kv_cache_clear()
            llama._ctx.decode(llama._batch)
            decodes += 1
            pooled = np.empty((len(pending), self.n_embd), dtype=np.float64)
            for seq in range(len(pending)):
                pointer = lib.llama_get_embeddings_seq(llama._ctx.ctx, seq)
                pooled[seq] = np.ctypeslib.as_array(pointer, shape=(self.n_embd,))
            vectors.extend(float32_resolution(normalized(pooled) if self.normalize else pooled).tolist())
            llama._batch.reset()
            pending.clear()
            used = 0

        every = [self.tokens(text, index) for index, text in enumerate(texts)]  # all checked before any decode
        llama._batch.reset()
        for tokens in every:
            check_cancelled(cancel)
            total += len(tokens)
            if pending and (used + len(tokens) > self.pack_tokens or len(pending) >= self.n_seq_max):
                flush()
            llama._batch.add_sequence(tokens, len(pending), True)
            pending.append(len(tokens))
            used += len(tokens)
        flush()
        llama._ctx.kv_cache_clear()
        return vectors, total, decodes


class LlamaEmbeddingEngine(StagedEngine):
    """A GGUF embedding model: tier 1 = context ready, tier 2 = file pages warm in RAM, tier 3 = nothing held."""

    options_table = "llama"
    options_type = LlamaOptions

    def __init__(self, model: Any, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options: LlamaOptions
        self.path = self.model_path()
        self.load_mode = "mmap" if self.options.use_mmap else "read"
        self._gguf: GgufFile | None = None
        self._batcher: EmbeddingBatcher | None = None
        self._warm = WarmPages(self.path, lock=self.options.lock_warm_pages)

    def _header(self) -> GgufFile:
        if self._gguf is None:
            self._gguf = read_gguf(self.path)
        return self._gguf

    def estimate(self) -> MemoryEstimate:
        """Weights per layer from the GGUF header; an encoder keeps no KV cache between requests."""
        estimate = estimate_gguf(self._header(), self.options, slots=1)
        estimate.kv_bytes_per_token = 0
        return estimate

    def read_weights(self) -> None:
        """Tier 2: hold the file's pages in RAM."""
        self._warm.hold()

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 1: the model and an embedding context, plan.gpu_layers of it on the device."""
        self._batcher = EmbeddingBatcher(self.path, self.options, self._header(), plan.gpu_layers)
        self.device = "cuda" if plan.gpu_layers > 0 and self.context.accelerator == "NvidiaCuda" else "cpu"

    def release_device(self) -> None:
        """Free the context and the model."""
        batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher.close()

    def release_warm(self) -> None:
        """Let the kernel drop the file's pages."""
        self._warm.release()

    def capabilities(self) -> EngineCapabilities:
        """Matryoshka models (`[models.llama] matryoshka = true`) take `dimensions`."""
        return EngineCapabilities(matryoshka=self.options.matryoshka)

    async def embed(self, texts: list[EmbeddingInput], cancel: CancelToken) -> EmbeddingResult:
        """Embed texts in as few decodes as the batch allows; vectors in input order."""
        self.require_ready()
        started = time.perf_counter()
        vectors, tokens, _decodes = await self.run_blocking(self._embed_blocking, texts, cancel)
        elapsed = (time.perf_counter() - started) * 1000
        rate = tokens / (elapsed / 1000) if elapsed > 0 else None
        timing = EngineTiming(prefill_ms=round(elapsed, 3), prefill_tokens_per_s=rate and round(rate, 1))
        return EmbeddingResult(vectors=vectors, prompt_tokens=tokens, timing=timing)

    def _embed_blocking(self, texts: list[EmbeddingInput], cancel: CancelToken) -> tuple[list[list[float]], int, int]:
        if self._batcher is None:  # demoted while this call waited on the worker
            raise ModelNotLoaded(self.model.id)
        return self._batcher.embed(texts, cancel)
