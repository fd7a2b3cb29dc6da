"""The `[models.llama]` table: how the engine builds its model and context on this machine."""

from __future__ import annotations

import os
from typing import Annotated

import msgspec


class LlamaOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Engine options read from a model's `[models.llama]` table; every key is optional.

    `repack` lets llama.cpp repack quantized weights for its CPU gemm kernels and use its tiled K-quant matmul:
    faster prompt processing, but a sequence's logits then depend on how many sequences share the step, so greedy
    answers can differ between a request run alone and the same request batched. Off by default: batching never
    changes an answer.

    `deterministic_prefill` decodes a prompt's last token in a step of its own, as after a full prefix hit, so that
    a greedy or seeded answer is the same whether or not its prefix was cached; it costs one more llama_decode
    before the first token of every prompt that was not all cached. Off by default: the last token goes with the
    rest of the prompt.
    """

    n_threads: int | None = None
    n_threads_batch: int | None = None
    # each decode's threads follow the scheduler's core share (at most n_threads) and drop while other programs want
    # the cores (the step times and /proc/pressure/cpu say so); false: n_threads for every decode, as configured
    adapt_threads: bool = True
    n_batch: int = 512
    # Embedding models: tokens packed into one decode (with flash attention on, the masked cells between packed
    # inputs cost nothing, so bigger packs only buy wider matmuls).
    embedding_batch_tokens: int = 256
    # Embedding models trained for shorter vectors (Matryoshka): `dimensions` truncates and renormalizes them
    matryoshka: bool = False
    n_ubatch: int = 512
    prefill_chunk: int = 256
    # Beside answers that stream, prompt chunks take at most this share of the loop's time (the streams keep about
    # 1 / (1 + share) of their pace while a long prompt prefills, 0.89x at 0.12: margin over the 0.8x that issue 40
    # asks, since a stream's own pace alone varies by more than 0.83x's margin; batch lines' decoding beside
    # interactive streams takes from the same share); alone, a chunk is cut to about prefill_step_secs (a batch
    # line's to a quarter), an interactive prompt's to no fewer than 128 tokens.
    prefill_share: Annotated[float, msgspec.Meta(gt=0)] = 0.12
    prefill_step_secs: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    # tool_choice "auto": the least probability the answer's first token gives to opening a call for a call to be
    # written there; under it the call's openers are banned and the model answers in words (0: off; call_gate.py)
    call_confidence: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    # a bare JSON call at the answer's start: where its name leaves the declared names, the least probability the
    # model gives them for the grammar to hold it to one; under it the answer is text (0: always held)
    call_name_confidence: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    # What a request that leaves them unset samples with (None: the GGUF's general.sampling.* value when it has one,
    # else the engine's 0.8 / 0.95 / 40 / 0.05, no repetition penalty, a window of 64); the model's own recommended
    # values, as in its generation_config.json
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    min_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    # the repetition penalty (1.0: off) over the latest repeat_last_n tokens, the prompt's included (-1: all of them)
    repeat_penalty: Annotated[float, msgspec.Meta(gt=0)] | None = None
    repeat_last_n: Annotated[int, msgspec.Meta(ge=-1)] | None = None
    use_mmap: bool = True
    repack: bool = False
    deterministic_prefill: bool = False
    lock_warm_pages: bool = False
    flash_attn: bool | None = None
    kv_unified: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    kv_idle_timeout_secs: float | None = None
    chat_template: str | None = None
    # the characters one prompt or input may hold before it is tokenized (400 past it); None: 8 a context token
    max_tokenize_chars: int | None = None
    verbose: bool = False

    def threads(self) -> int:
        """Threads for token generation: configured, else the CPUs this process may use."""
        if self.n_threads:
            return self.n_threads
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - not Linux
            return max(1, os.cpu_count() or 1)

    def batch_threads(self) -> int:
        """Threads for prompt processing."""
        return self.n_threads_batch or self.threads()


KV_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
}
GGML_TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}
