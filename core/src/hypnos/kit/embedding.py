"""EmbeddingEngine: the plugin writes `tokenize` and `embed_batch`; the kit checks the inputs and batches requests.

The kit takes texts and token-id inputs alike: each text is tokenized by the model's own tokenizer, token ids are
checked against the vocabulary, an input longer than the model takes is a 400 `context_length_exceeded` (never cut
silently), and the inputs of concurrent requests share `embed_batch` calls (hypnos.kit.batching). `dimensions`
(Matryoshka) is the server's: it shortens and renormalizes the vectors of a model whose `matryoshka` is true.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from hypnos.engine import CancelToken, EmbeddingInput, EmbeddingResult, EngineCapabilities, EngineContext
from hypnos.errors import HypnosError, invalid_request
from hypnos.kit.batching import BATCHING_TABLE, Batcher, BatchingOptions, BatchLimits
from hypnos.kit.staged import ModelNotLoaded, StagedEngine
from hypnos.types import EngineTiming

if TYPE_CHECKING:
    from hypnos.config import ModelConfig


def context_length_exceeded(where: str, tokens: int, most: int) -> HypnosError:
    """The 400 for an input longer than the model takes (`where`: the field, e.g. `input[2]`)."""
    # OpenAI's words, which clients (litellm, LangChain) read as a context overflow
    message = (
        f"{where} is too long: {tokens} tokens > {most} maximum. This model's maximum context length is {most} tokens"
    )
    return HypnosError(400, "invalid_request_error", message, code="context_length_exceeded")


def prefill_timing(started: float, tokens: int, shared: int | None = None) -> EngineTiming:
    """The time since `started` (perf_counter) as prefill, its tokens/s, and how many requests shared the calls."""
    elapsed = (time.perf_counter() - started) * 1000
    rate = tokens / (elapsed / 1000) if elapsed > 0 else None
    return EngineTiming(
        prefill_ms=round(elapsed, 3), prefill_tokens_per_s=rate and round(rate, 1), concurrent_slots=shared
    )


class EmbeddingEngine(StagedEngine):
    """An embedding model whose inputs are batched across requests. Besides the four tier hooks, write:

      tokenize(text) -> token ids          the model's own tokens of one text (special tokens included)
      embed_batch(batch) -> vectors        one vector per token-id list, in order (a list of lists or a 2-D array)

    both blocking, on the model's worker, at tier 1 only; and set `self.max_tokens` (the longest input the model
    takes) and `self.vocab_size` in `build`. `batching` holds the measured defaults of `[models.batching]`.
    """

    batching: ClassVar[BatchLimits] = BatchLimits(max_batch_size=32, max_wait_ms=2.0)
    matryoshka: bool = False  # True: trained for shorter vectors, so requests may send `dimensions`

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.max_tokens = 0
        self.vocab_size = 0
        limits = self.batching.configured(context.options_for(model, BATCHING_TABLE, BatchingOptions))
        self.batcher: Batcher[EmbeddingInput, list[int], tuple[Any, int]] = Batcher(
            self.worker, self._embed_on_worker, limits, prepare=self._checked_tokens
        )

    # ---- the plugin's part (blocking, on the worker) --------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """The model's token ids of one text, special tokens included."""
        raise NotImplementedError

    def embed_batch(self, batch: list[list[int]]) -> Any:
        """One vector per token-id list, in order."""
        raise NotImplementedError

    # ---- the kit's part -------------------------------------------------------------------------------------------

    def capabilities(self) -> EngineCapabilities:
        """Batched; Matryoshka models take `dimensions`."""
        return EngineCapabilities(matryoshka=self.matryoshka, batching=True)

    async def embed(self, texts: list[EmbeddingInput], cancel: CancelToken) -> EmbeddingResult:
        """Vectors in input order; the inputs may share library calls with other requests' inputs."""
        self.require_ready()
        started = time.perf_counter()
        batched = await self.batcher.run(texts, cancel)
        vectors = [vector for vector, _ in batched.results]
        tokens = sum(count for _, count in batched.results)
        return EmbeddingResult(
            vectors=vectors, prompt_tokens=tokens, timing=prefill_timing(started, tokens, batched.shared)
        )

    def _checked_tokens(self, inputs: list[EmbeddingInput]) -> list[list[int]]:
        """Every input's token ids, checked before any is embedded: ids inside the vocabulary, none too long."""
        if not self.ready:
            raise ModelNotLoaded(self.model.id)
        checked = []
        for index, item in enumerate(inputs):
            if isinstance(item, str):
                tokens = self.tokenize(item)
            else:
                tokens = list(item)
                if any(not 0 <= token < self.vocab_size for token in tokens):
                    raise invalid_request(
                        f"`input[{index}]` holds a token id outside the vocabulary (0..{self.vocab_size - 1})"
                    )
            if len(tokens) > self.max_tokens:
                raise context_length_exceeded(f"`input[{index}]`", len(tokens), self.max_tokens)
            if not tokens:
                raise invalid_request(f"`input[{index}]` holds no tokens")
            checked.append(tokens)
        return checked

    def _embed_on_worker(self, batch: list[list[int]]) -> Sequence[tuple[Any, int]]:
        if not self.ready:  # demoted while the batch waited on the worker
            raise ModelNotLoaded(self.model.id)
        vectors = self.embed_batch(batch)
        rows = vectors.tolist() if hasattr(vectors, "tolist") else [list(vector) for vector in vectors]
        return [(row, len(tokens)) for row, tokens in zip(rows, batch, strict=True)]
