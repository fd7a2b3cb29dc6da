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
    EngineContext,
    MemoryEstimate,
    RerankInput,
    RerankResult,
)
from hypnos.errors import invalid_request
from hypnos.kit.batching import BatchLimits
from hypnos.kit.device_oom import llama_cpp_out_of_memory
from hypnos.kit.embedding import EmbeddingEngine, context_length_exceeded, prefill_timing
from hypnos.kit.staged import ModelNotLoaded, check_cancelled
from hypnos.kit.warm_pages import WarmPages
from hypnos.types import LayerPlacementPlan

from hypnos_llama.embedding.convert_bert import MAX_SEQUENCE_KEY, NORMALIZE_KEY
from hypnos_llama.estimate import estimate_gguf
from hypnos_llama.gguf_meta import GgufFile, read_gguf
from hypnos_llama.options import LlamaOptions
from hypnos_llama.runtime import import_llama_cpp
from hypnos_llama.tokenize_bound import check_chars, tokenize_chars_cap

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


RANK_POOLING = 4  # LLAMA_POOLING_TYPE_RANK: the classification head in the graph, one score per sequence
CLASSIFIER_TENSORS = ("cls.weight", "cls.output.weight")


def is_reranker(gguf: GgufFile) -> bool:
    """A cross-encoder GGUF: rank pooling in its metadata, or a classification head (`cls` / `cls.output`)."""
    if gguf.arch_value("pooling_type") == RANK_POOLING:
        return True
    return any(tensor.name in CLASSIFIER_TENSORS for tensor in gguf.tensors)


class EmbeddingContext:
    """Owns a llama.cpp embedding context; packs inputs into decodes of up to n_batch tokens and n_seq_max sequences."""

    def __init__(self, path: Path, options: LlamaOptions, gguf: GgufFile, n_gpu_layers: int) -> None:
        lib = import_llama_cpp()
        self.lib = lib
        trained = int(gguf.arch_value("context_length", 512) or 512)
        self.max_tokens = int(gguf.metadata.get(MAX_SEQUENCE_KEY) or trained)
        self.chars_cap = tokenize_chars_cap(options.max_tokenize_chars, self.max_tokens)
        self.model_id = path.name
        self.normalize = bool(gguf.metadata.get(NORMALIZE_KEY, True))
        n_batch = max(options.n_batch, self.max_tokens)
        self.rank = is_reranker(gguf)
        self.llama = lib.Llama(
            str(path),
            embedding=True,
            pooling_type=RANK_POOLING if self.rank else lib.LLAMA_POOLING_TYPE_UNSPECIFIED,
            n_ctx=n_batch,
            n_batch=n_batch,
            n_ubatch=n_batch,
            n_gpu_layers=n_gpu_layers,
            # Flash attention skips the masked cells, so packing many inputs into one decode costs no n_tokens^2; a
            # reranker goes without by default: with it a pair's score moves (~1e-3) with what shares its decode.
            flash_attn=(not self.rank) if options.flash_attn is None else options.flash_attn,
            n_threads=options.threads(),
            n_threads_batch=options.batch_threads(),
            use_mmap=options.use_mmap,
            verbose=options.verbose,
        )
        self.n_batch = n_batch
        self.pack_tokens = max(1, min(options.embedding_batch_tokens, n_batch))
        self.n_seq_max = int(self.llama.context_params.n_seq_max)
        self.n_embd = int(self.llama.n_embd())
        self.n_vocab = int(self.llama.n_vocab())
        self.sep = int(lib.llama_vocab_sep(self.llama._model.vocab)) if hasattr(lib, "llama_vocab_sep") else -1
        self.rerank_template = self.llama.metadata.get("tokenizer.chat_template.rerank")
        self.decodes = 0  # llama_decode calls made (packing many inputs into one is the point)

    def close(self) -> None:
        """Free the context and model."""
        self.llama.close()

    def tokens(self, text: str) -> list[int]:
        """Tokens of one text, as the model reads an embedding input (BOS/CLS and the vocabulary's end tokens); 400
        before tokenizing a text past the characters cap."""
        check_chars(text, self.chars_cap, self.model_id, "an input")
        return self.llama.tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def embed(self, sequences: list[list[int]]) -> Any:
        """The vectors of token sequences (normalized when the GGUF says so), as a 2-D array in input order."""
        pooled = self._pooled(sequences, self.n_embd, CancelToken())
        return float32_resolution(normalized(pooled) if self.normalize else pooled)

    def pair_tokens(self, query: str, document: str, index: int) -> list[int]:
        """One (query, document) input as llama.cpp's server builds it: the GGUF's rerank template when it has
        one, else BOS query EOS SEP document EOS as the vocabulary adds them (BERT: [CLS] q [SEP] d); 400 when
        longer than the model's sequence length (or, before tokenizing, than its characters cap)."""
        llama, lib = self.llama, self.lib
        check_chars(query + document, self.chars_cap, self.model_id, f"The query with `documents[{index}]`")
        if self.rerank_template:
            prompt = self.rerank_template.replace("{query}", query).replace("{document}", document)
            tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        else:
            vocab = llama._model.vocab
            eos = int(lib.llama_vocab_eos(vocab))
            eos = self.sep if eos < 0 else eos
            bos = [int(lib.llama_vocab_bos(vocab))] if lib.llama_vocab_get_add_bos(vocab) else []
            end = [eos] if lib.llama_vocab_get_add_eos(vocab) else []
            sep = [self.sep] if lib.llama_vocab_get_add_sep(vocab) else []
            query_tokens = llama.tokenize(query.encode("utf-8"), add_bos=False, special=False)
            doc_tokens = llama.tokenize(document.encode("utf-8"), add_bos=False, special=False)
            tokens = [*bos, *query_tokens, *end, *sep, *doc_tokens, *end]
        if len(tokens) > self.max_tokens:
            raise context_length_exceeded(f"The query with `documents[{index}]`", len(tokens), self.max_tokens)
        return tokens

    def rerank(self, query: str, documents: list[str], cancel: CancelToken) -> tuple[list[float], int]:
        """One relevance score per document (the classification head's first output, as llama.cpp's server
        answers), and the prompt token count."""
        if not self.rank:
            raise invalid_request(
                "This model is an embedding model, not a reranker: /v1/rerank needs a cross-encoder GGUF "
                "(rank pooling, a classification head)"
            )
        every = [self.pair_tokens(query, document, index) for index, document in enumerate(documents)]
        width = int(self.lib.llama_model_n_cls_out(self.llama._model.model)) or 1
        pooled = self._pooled(every, width, cancel)
        return [round(float(row[0]), 7) for row in pooled], sum(len(tokens) for tokens in every)

    def _pooled(self, sequences: list[list[int]], width: int, cancel: CancelToken) -> Any:
        """The pooled output (`width` floats) of each token sequence, packed many to a decode."""
        import numpy as np

        llama, lib = self.llama, self.lib
        rows: list[Any] = []
        pending = 0
        used = 0

        def flush() -> None:
            nonlocal used, pending
            if not pending:
                return
            llama._ctx.kv_cache_clear()
            llama._ctx.decode(llama._batch)
            self.decodes += 1
            pooled = np.empty((pending, width), dtype=np.float64)
            for seq in range(pending):
                pointer = lib.llama_get_embeddings_seq(llama._ctx.ctx, seq)
                pooled[seq] = np.ctypeslib.as_array(pointer, shape=(width,))
            rows.append(pooled)
            llama._batch.reset()
            pending = used = 0

        llama._batch.reset()
        for tokens in sequences:
            check_cancelled(cancel)
            if pending and (used + len(tokens) > self.pack_tokens or pending >= self.n_seq_max):
                flush()
            llama._batch.add_sequence(tokens, pending, True)
            pending += 1
            used += len(tokens)
        flush()
        llama._ctx.kv_cache_clear()
        return np.concatenate(rows) if rows else np.empty((0, width))


class LlamaEmbeddingEngine(EmbeddingEngine):
    """A GGUF embedding model: tier 1 = context ready, tier 2 = file pages warm in RAM, tier 3 = nothing held.

    Embeddings go through the kit (hypnos.kit.embedding): input checks, and the inputs of concurrent requests packed
    into shared decodes; rerank runs per request on the same worker."""

    options_table = "llama"
    options_type = LlamaOptions
    # a call holds the starter's 32 requests of a text or two (packed into decodes of embedding_batch_tokens); a sweep
    # of 32/64/128 inputs and 0/2/8 ms (bench embeddings_bench, 2-core EPYC at load 6-9) could not tell them apart
    batching = BatchLimits(max_batch_size=64, max_wait_ms=2.0)

    def __init__(self, model: Any, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options: LlamaOptions
        self.path = self.model_path()
        self.load_mode = "mmap" if self.options.use_mmap else "read"
        self.matryoshka = self.options.matryoshka
        self._gguf: GgufFile | None = None
        self._context: EmbeddingContext | None = None
        self._warm = WarmPages(self.path, lock=self.options.lock_warm_pages)

    def _header(self) -> GgufFile:
        if self._gguf is None:
            self._gguf = read_gguf(self.path)
        return self._gguf

    def device_oom(self, error: BaseException) -> bool:
        """llama-cpp-python's failed allocation in a decode (`llama_decode returned -2`)."""
        return llama_cpp_out_of_memory(error)

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
        self._context = EmbeddingContext(self.path, self.options, self._header(), plan.gpu_layers)
        self.max_tokens, self.vocab_size = self._context.max_tokens, self._context.n_vocab
        self.device = "cuda" if plan.gpu_layers > 0 and self.context.accelerator == "NvidiaCuda" else "cpu"

    def release_device(self) -> None:
        """Free the context and the model."""
        context, self._context = self._context, None
        if context is not None:
            context.close()

    def release_warm(self) -> None:
        """Let the kernel drop the file's pages."""
        self._warm.release()

    def _loaded(self) -> EmbeddingContext:
        if self._context is None:  # demoted while this call waited on the worker
            raise ModelNotLoaded(self.model.id)
        return self._context

    def tokenize(self, text: str) -> list[int]:
        """The tokens llama.cpp reads for one text."""
        return self._loaded().tokens(text)

    def embed_batch(self, batch: list[list[int]]) -> Any:
        """The batch's vectors, packed into as few decodes as `embedding_batch_tokens` allows."""
        return self._loaded().embed(batch)

    async def embed(self, texts: list[EmbeddingInput], cancel: CancelToken) -> EmbeddingResult:
        """Embed texts or token ids (a reranker refuses: it scores on /v1/rerank)."""
        if is_reranker(self._header()):
            raise invalid_request("This model is a reranker (rank pooling): it scores documents on POST /v1/rerank")
        return await super().embed(texts, cancel)

    async def rerank(self, job: RerankInput, cancel: CancelToken) -> RerankResult:
        """Score each document against the query with the model's classification head (llama.cpp rank pooling)."""
        self.require_ready()
        started = time.perf_counter()
        scores, tokens = await self.run_blocking(self._rerank_blocking, job, cancel)
        return RerankResult(scores=scores, prompt_tokens=tokens, timing=prefill_timing(started, tokens))

    def _rerank_blocking(self, job: RerankInput, cancel: CancelToken) -> tuple[list[float], int]:
        return self._loaded().rerank(job.query, job.documents, cancel)
