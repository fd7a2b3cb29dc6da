"""What the batch loop works with: a chat job (one request) and an execution slot (one llama.cpp sequence)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypnos.engine import CancelToken, ChatEvent, ChatFinished
from hypnos.kit.prompt_cache import common_prefix
from hypnos.types import EngineTiming

from hypnos_llama.sampling import SamplingParams

__all__ = ["ChatJob", "Slot", "common_prefix", "finished_event"]


@dataclass
class ChatJob:
    """One chat request as the worker sees it: prompt tokens, limits, sampling and where events go."""

    prompt: list[int]
    max_tokens: int
    required_ctx: int
    sampling: SamplingParams
    emit: Callable[[ChatEvent | BaseException], None]
    cancel: CancelToken = field(default_factory=CancelToken)
    submitted: float = field(default_factory=time.perf_counter)
    abandoned: bool = False
    context_ms: float | None = None
    media: Any = None  # a multimodal.MediaPrompt: chunks mtmd evaluates before the final text is prefilled
    # Tokens (and their text) the server inserts after the next sampled token, e.g. to close a thinking block.
    injections: queue.SimpleQueue[tuple[list[int], str]] = field(default_factory=queue.SimpleQueue)
    # Worker-side thinking budget (hypnos_llama.chat_plan.ThinkingGuard), when the request has one.
    thinking_guard: Any = None
    # Worker-side retry of an answer that restates a call after a tool result (hypnos_llama.echo_guard.EchoGuard).
    echo_guard: Any = None
    index: int = 0  # which of the request's `n` choices this job decodes
    stop: list[str] = field(default_factory=list)  # strings that end the answer (not sent)
    top_logprobs: int | None = None  # None: no log probabilities; else how many alternatives per token
    restore: Any = None  # a CachedPrompt the prompt cache found: restored into the slot when it beats the slot's
    scope: str | None = None  # the prompt cache's isolation scope (ChatInput.cache_scope)
    priority: int = 0  # below 0: a batch line, run in what interactive jobs leave (ChatInput.priority)
    # The client's prompt as usage reports it, (tokens, of them held by the slot or a saved state), set when a slot
    # first takes the job: a restart from another prompt (echo_guard) answers the same request
    usage: tuple[int, int] | None = None

    def inject(self, tokens: list[int], text: str) -> None:
        """Insert `tokens` into the answer after the next sampled token (thread-safe)."""
        self.injections.put((tokens, text))

    def take_injection(self) -> tuple[list[int], str] | None:
        """The next pending injection, if any."""
        try:
            return self.injections.get_nowait()
        except queue.Empty:
            return None

    @property
    def reserve(self) -> int:
        """KV cells this request can fill at most (prompt plus generation)."""
        return min(self.required_ctx, len(self.prompt) + self.max_tokens)

    def prompt_usage(self) -> tuple[int, int]:
        """The prompt tokens and cached tokens usage reports for this request."""
        return self.usage if self.usage is not None else (len(self.prompt), 0)

    def stopped(self) -> bool:
        """True once the client went away or the token was cancelled."""
        return self.abandoned or self.cancel.cancelled


@dataclass
class Slot:
    """An execution slot: one llama.cpp sequence, its cached tokens and the request it runs now."""

    seq_id: int
    cached: list[int] = field(default_factory=list)
    job: ChatJob | None = None
    pending: list[int] = field(default_factory=list)
    next_token: int | None = None
    sampler: Any = None
    output: Any = None  # a choice_output.ChoiceOutput while a job runs
    completion: int = 0
    reused: int = 0
    concurrent: int = 0
    admitted: float = 0.0
    passed_over: int = 0  # prompt tokens prefilled for prompts put ahead of this one's (step_slots.prefill_order)
    first_token: float | None = None
    last_used: float = 0.0
    pos_offset: int = 0  # position minus cell index after media (M-RoPE images take fewer positions than cells)
    media: bool = False  # the cells hold media embeddings (`cached` has their content ids; positions: pos_offset)
    saved: int = 0  # how many of `cached` the prompt cache holds (a save is skipped while nothing was added)
    scope: str | None = None  # the isolation scope of the request that filled the cells


def finished_event(slot: Slot, job: ChatJob, reason: str) -> ChatFinished:
    """The job's last event: why it ended, its usage and its timings."""
    end = time.perf_counter()
    first = slot.first_token or end
    prefill_s = max(first - slot.admitted, 1e-9)
    decode_s = end - first
    prefilled = len(job.prompt) - slot.reused
    timing = EngineTiming(
        queue_ms=(slot.admitted - job.submitted) * 1000,
        context_ms=job.context_ms,
        prefill_ms=prefill_s * 1000,
        decode_ms=decode_s * 1000,
        ttft_ms=(first - job.submitted) * 1000,
        prefill_tokens_per_s=prefilled / prefill_s,
        decode_tokens_per_s=(slot.completion - 1) / decode_s if slot.completion > 1 and decode_s > 0 else None,
        cached_tokens=slot.reused,
        concurrent_slots=max(1, slot.concurrent),
    )
    prompt_tokens, cached_tokens = job.prompt_usage()
    return ChatFinished(
        finish_reason=reason,
        index=job.index,
        prompt_tokens=prompt_tokens,
        completion_tokens=slot.completion,
        cached_tokens=cached_tokens,
        timing=timing,
        stop_sequence=slot.output.matcher.matched if slot.output is not None else None,
    )


def send_event(job: ChatJob, event: ChatEvent | BaseException) -> None:
    """Deliver an event to the job's consumer; a consumer whose loop is gone abandons the job."""
    try:
        job.emit(event)
    except RuntimeError:  # the event loop closed under us
        job.abandoned = True
