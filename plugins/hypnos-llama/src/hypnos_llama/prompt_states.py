"""The llama engine's side of the prompt cache (section 14): a slot's KV state saved by prefix before the slot is
reused for another prompt, when a request leaves many new tokens in it, and when the model leaves tier 1 (with KV
parking on: every idle slot, parked under its cap); a saved state that shares more of a new prompt than any slot does
restored into the slot the prompt takes. Media cells are saved too: a state starts with the position offset its media
left (M-RoPE), and a media prompt takes a state only when it holds all of the prompt's media."""

from __future__ import annotations

import asyncio
import logging
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from hypnos.config import PromptCacheConfig
from hypnos.engine import CachedPrompt, PromptCache
from hypnos.kit.prompt_cache import BLOCK_TOKENS, PromptSaver, cache_namespace, file_identity

from hypnos_llama.options import LlamaOptions
from hypnos_llama.slots import ChatJob, Slot, common_prefix

if TYPE_CHECKING:
    from hypnos_llama.runtime import LlamaContext

logger = logging.getLogger(__name__)
OFFSET = struct.Struct("<q")  # a saved state's head: the slot's positions minus cells (after its media)
FORMAT = 2  # in the namespace: states of another layout of the saved bytes are never found


def shared_prefix(slot: Slot, job: ChatJob) -> int:
    """The prompt tokens a slot's cells may serve: none across isolation scopes."""
    return common_prefix(slot.cached, job.prompt) if slot.scope == job.scope else 0


def choose_slot(idle: list[Slot], job: ChatJob) -> Slot:
    """The idle slot a job takes: of those where the prompt keeps at least as many cells as it drops (an empty slot,
    one holding a prefix of the prompt, the conversation's own slot), the one sharing the most of it; else the least
    recently used. A template's shared head is not worth another conversation's cells while a slot is free."""
    worth = [slot for slot in idle if 2 * shared_prefix(slot, job) >= len(slot.cached)]
    if worth:
        return max(worth, key=lambda slot: (shared_prefix(slot, job), -slot.last_used))
    return min(idle, key=lambda slot: slot.last_used)


def kept_prefix(slot: Slot, job: ChatJob) -> int:
    """The slot's tokens a job keeps: a media prompt keeps them only when they hold all of its media."""
    shared = shared_prefix(slot, job)
    if job.media is not None and (not slot.media or shared < job.media.head_tokens):
        return 0
    return shared


class PromptStates:
    """Saves, parks and restores one model's slot states through the prompt cache store."""

    def __init__(
        self,
        store: PromptCache,
        model_id: str,
        config: PromptCacheConfig,
        weights: Path,
        options: LlamaOptions,
        parked: bool = False,
    ) -> None:
        self.model_id = model_id
        self.enabled, self.min_tokens = config.enabled, config.min_tokens
        # the shortest prompt looked up: min_tokens, or a block after the model parked conversations (any length)
        self.lookup_from = BLOCK_TOKENS if parked else config.min_tokens if config.enabled else None
        identity = file_identity(weights)
        # what a state must match besides the tokens: the weights and the KV cells' types and layout
        self._layout = (identity, options.type_k, options.type_v, options.flash_attn, options.kv_unified, FORMAT)
        self.store = store
        self.saver = PromptSaver(store, model_id, [identity])

    def namespace(self, context: LlamaContext, scope: str | None) -> str:
        """The key prefix of this context's states for an isolation scope. Not the context's length: a sequence's
        state holds its cells, not the pool's size, so one saved before the context grew is found after it."""
        return cache_namespace(self._layout, context.shape.n_seq, scope)

    def lookup(self, context: LlamaContext, slots: list[Slot], job: ChatJob) -> CachedPrompt | None:
        """The saved state sharing more of the job's prompt than any slot (read on a request's thread)."""
        held = max((kept_prefix(slot, job) for slot in slots), default=0)
        found = self.store.lookup(self.model_id, self.namespace(context, job.scope), job.prompt, held)
        if found is None or min(common_prefix(found.tokens, job.prompt), len(job.prompt) - 1) <= held:
            return None
        return found

    async def find(self, context: LlamaContext, slots: list[Slot], jobs: list[ChatJob]) -> None:
        """Look a request's prompt up (on a thread, when it is long enough) and give its jobs what was found."""
        if self.lookup_from is not None and len(jobs[0].prompt) >= max(self.lookup_from, BLOCK_TOKENS):
            found = await asyncio.to_thread(self.lookup, context, slots, jobs[0])
            for job in jobs:
                job.restore = found

    def save(self, context: LlamaContext, slot: Slot, *, keep_all: bool = False, parked: bool = False) -> bool:
        """Hand the slot's state to the store when it holds enough tokens not saved yet (the batch loop's thread);
        `parked`: every slot of a full block or more, saved or not (KV parking). True when one was handed over."""
        if parked:
            if len(slot.cached) < BLOCK_TOKENS:
                return False
        elif not self.enabled or len(slot.cached) < self.min_tokens or slot.saved >= len(slot.cached):
            return False
        blob = context.seq_state(slot.seq_id, head=OFFSET.pack(slot.pos_offset))
        if len(blob) <= OFFSET.size:
            return False
        self.saver.save(self.namespace(context, slot.scope), list(slot.cached), blob, keep_all=keep_all, parked=parked)
        slot.saved = len(slot.cached)
        return True

    def finished(self, context: LlamaContext, slot: Slot) -> None:
        """After a request: save when it left at least min_tokens new tokens (a long prompt survives a restart)."""
        if len(slot.cached) - slot.saved >= self.min_tokens:
            self.save(context, slot)

    def prepare(self, context: LlamaContext, slot: Slot, job: ChatJob) -> None:
        """Before a job takes the slot: save what it would lose, then restore the job's found state when it shares
        more of the prompt than the slot does (a refused state leaves the slot empty: the prompt prefills)."""
        kept = kept_prefix(slot, job)
        if kept < len(slot.cached):
            self.save(context, slot)
        found: CachedPrompt | None = job.restore
        job.restore = None  # the job holds no state once it starts (a long request's found state is freed at once)
        if found is None:
            return
        shared = min(common_prefix(found.tokens, job.prompt), len(job.prompt) - 1)
        if shared <= kept or (job.media is not None and shared < job.media.head_tokens):
            return
        slot.scope = job.scope
        context.seq_trim(slot.seq_id, 0)
        if len(found.state) > OFFSET.size and context.set_seq_state(slot.seq_id, found.state, skip=OFFSET.size):
            slot.cached, slot.saved = list(found.tokens), len(found.tokens)
            slot.pos_offset = OFFSET.unpack_from(found.state)[0]
            slot.media = any(token < 0 for token in found.tokens)  # media cells hold negative content ids
            return
        logger.info("llama.cpp refused a saved prompt state of %s (%s tier)", self.model_id, found.tier)
        context.seq_trim(slot.seq_id, 0)
        slot.cached, slot.saved, slot.pos_offset, slot.media = [], 0, 0, False

    def leave(self, context: LlamaContext, slots: list[Slot], *, park: bool) -> bool:
        """The model leaves tier 1: save every idle slot (parked with KV parking on; `close` waits until the store
        has them); True when any was parked."""
        parked: list[int] = []
        for slot in slots:
            if slot.job is None:
                try:
                    if self.save(context, slot, keep_all=True, parked=park) and park:
                        parked.append(len(slot.cached))
                except Exception as error:  # an optimisation: a failure costs a prefill later
                    logger.warning("could not save a slot of %s: %s", self.model_id, error)
        if parked:
            logger.info("parking %d slots of %s (%d tokens)", len(parked), self.model_id, sum(parked))
        return bool(parked)

    def close(self) -> None:
        """Hand over the queued states and stop the saver's thread."""
        self.saver.close()
