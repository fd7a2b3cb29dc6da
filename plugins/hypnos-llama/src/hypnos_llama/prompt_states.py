"""The llama engine's side of the prompt cache (section 14): a slot's KV state saved by prefix before the slot is
reused for another prompt, when a request leaves many new tokens in it, and when the model leaves tier 1; a saved
state that shares more of a new prompt than any slot does restored into the slot the prompt takes."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from hypnos.config import PromptCacheConfig
from hypnos.engine import CachedPrompt, PromptCache
from hypnos.kit.prompt_cache import PromptSaver, cache_namespace, file_identity

from hypnos_llama.options import LlamaOptions
from hypnos_llama.slots import ChatJob, Slot, common_prefix

if TYPE_CHECKING:
    from hypnos_llama.runtime import LlamaContext

logger = logging.getLogger(__name__)


def shared_prefix(slot: Slot, job: ChatJob) -> int:
    """The prompt tokens a slot's cells may serve: none across isolation scopes."""
    return common_prefix(slot.cached, job.prompt) if slot.scope == job.scope else 0


class PromptStates:
    """Saves and restores one model's slot states through the prompt cache store."""

    def __init__(
        self, store: PromptCache, model_id: str, config: PromptCacheConfig, weights: Path, options: LlamaOptions
    ) -> None:
        self.model_id = model_id
        self.min_tokens = config.min_tokens
        identity = file_identity(weights)
        # what a state must match besides the tokens: the weights and the KV cells' types and layout
        self._layout = (identity, options.type_k, options.type_v, options.flash_attn, options.kv_unified)
        self.store = store
        self.saver = PromptSaver(store, model_id, [identity])

    def namespace(self, context: LlamaContext, scope: str | None) -> str:
        """The key prefix of this context's states for an isolation scope (context length in it)."""
        return cache_namespace(self._layout, context.shape.n_ctx, context.shape.n_seq, scope)

    def lookup(self, context: LlamaContext, slots: list[Slot], job: ChatJob) -> CachedPrompt | None:
        """The saved state sharing more of the job's prompt than any slot (read on a request's thread)."""
        held = max((shared_prefix(slot, job) for slot in slots), default=0)
        found = self.store.lookup(self.model_id, self.namespace(context, job.scope), job.prompt, held)
        if found is None or min(common_prefix(found.tokens, job.prompt), len(job.prompt) - 1) <= held:
            return None
        return found

    async def find(self, context: LlamaContext, slots: list[Slot], jobs: list[ChatJob]) -> None:
        """Look a request's prompt up (on a thread, when it has min_tokens) and give its jobs what was found."""
        if len(jobs[0].prompt) >= self.min_tokens:
            found = await asyncio.to_thread(self.lookup, context, slots, jobs[0])
            for job in jobs:
                job.restore = found

    def save(self, context: LlamaContext, slot: Slot, *, keep_all: bool = False) -> None:
        """Hand the slot's state to the store when it holds enough tokens not saved yet (the batch loop's thread)."""
        if slot.media or len(slot.cached) < self.min_tokens or slot.saved >= len(slot.cached):
            return
        state = context.seq_state(slot.seq_id)
        if state:
            self.saver.save(self.namespace(context, slot.scope), list(slot.cached), state, keep_all=keep_all)
            slot.saved = len(slot.cached)

    def finished(self, context: LlamaContext, slot: Slot) -> None:
        """After a request: save when it left at least min_tokens new tokens (a long prompt survives a restart)."""
        if len(slot.cached) - slot.saved >= self.min_tokens:
            self.save(context, slot)

    def prepare(self, context: LlamaContext, slot: Slot, job: ChatJob) -> None:
        """Before a job takes the slot: save what it would lose, then restore the job's found state when it shares
        more of the prompt than the slot does (a refused state leaves the slot empty: the prompt prefills)."""
        kept = 0 if job.media is not None else shared_prefix(slot, job)
        if kept < len(slot.cached):
            self.save(context, slot)
        found: CachedPrompt | None = job.restore
        if found is None or job.media is not None:
            return
        if min(common_prefix(found.tokens, job.prompt), len(job.prompt) - 1) <= kept:
            return
        slot.pos_offset, slot.media, slot.scope = 0, False, job.scope
        context.seq_trim(slot.seq_id, 0)
        if context.set_seq_state(slot.seq_id, found.state):
            slot.cached, slot.saved = list(found.tokens), len(found.tokens)
            return
        logger.info("llama.cpp refused a saved prompt state of %s (%s tier)", self.model_id, found.tier)
        context.seq_trim(slot.seq_id, 0)
        slot.cached, slot.saved = [], 0

    def save_idle(self, context: LlamaContext, slots: list[Slot]) -> None:
        """Save every idle slot's state (the model leaves tier 1), then wait until the store has them."""
        for slot in slots:
            if slot.job is None:
                try:
                    self.save(context, slot, keep_all=True)
                except Exception as error:  # an optimisation: a failure costs a prefill later
                    logger.warning("could not save a slot of %s: %s", self.model_id, error)

    def close(self) -> None:
        """Hand over the queued states and stop the saver's thread."""
        self.saver.close()
