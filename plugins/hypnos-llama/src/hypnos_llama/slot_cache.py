"""The slots' KV cells: making room for a new job, clearing idle caches, keeping the prefix a new job shares with
what a slot holds (or another slot: borrowed), and keeping or evaluating a media head."""

from __future__ import annotations

import logging
from collections.abc import Callable

from hypnos.errors import HypnosError, server_error

from hypnos_llama.prompt_states import shared_prefix
from hypnos_llama.runtime import LlamaContext
from hypnos_llama.slots import ChatJob, Slot, common_prefix

logger = logging.getLogger(__name__)
MIN_BORROWED = 32  # a shorter prefix another slot holds is prefilled again rather than shared


def make_room(
    context: LlamaContext,
    slots: list[Slot],
    job: ChatJob,
    chosen: Slot,
    free: int,
    save: Callable[[Slot], None] | None = None,
) -> None:
    """Clear idle slots' caches, least recently used first, until the job fits beside them (`save` sees each slot
    before its cells go: the prompt cache)."""
    reuse = common_prefix(chosen.cached, job.prompt)
    others = sorted((s for s in slots if s.job is None and s is not chosen and s.cached), key=lambda s: s.last_used)
    held = sum(len(s.cached) for s in others)
    for slot in others:
        if held + job.reserve - reuse <= free:
            break
        if save is not None:
            save(slot)
        context.seq_trim(slot.seq_id, 0)
        held -= len(slot.cached)
        slot.cached = []


def clear_idle_caches(
    context: LlamaContext,
    slots: list[Slot],
    *,
    used_before: float | None = None,
    save: Callable[[Slot], None] | None = None,
) -> bool:
    """Drop the cached prefixes of idle slots (only those last used before `used_before` when given, each shown to
    `save` first); True when any cells were freed."""
    freed = False
    for slot in slots:
        if slot.job is None and slot.cached and (used_before is None or slot.last_used < used_before):
            if save is not None:
                save(slot)
            context.seq_trim(slot.seq_id, 0)
            slot.cached = []
            freed = True
    return freed


def rebuild_carrying_cells(
    context: LlamaContext, slots: list[Slot], rebuild: Callable[[], LlamaContext]
) -> LlamaContext:
    """The context `rebuild` makes, holding the slots' cells of `context` (a slot whose cells llama.cpp refuses
    there starts empty)."""
    carried = [(slot, context.seq_state(slot.seq_id)) for slot in slots if slot.cached]
    rebuilt = rebuild()
    for slot, state in carried:
        if not state or not rebuilt.set_seq_state(slot.seq_id, state):
            logger.info("llama.cpp refused slot %d's cells in the rebuilt context", slot.seq_id)
            rebuilt.seq_trim(slot.seq_id, 0)
            slot.cached, slot.saved, slot.pos_offset, slot.media = [], 0, 0, False
    return rebuilt


def keep_prefix(context: LlamaContext, slot: Slot, job: ChatJob) -> int | HypnosError:
    """Trim the slot's cells to what the job's prompt shares with them (its media head evaluated when the slot does
    not hold it); the prompt tokens kept, or the error the job fails with when its media cannot be read."""
    if job.media is not None and slot.scope == job.scope and reuse_media_head(context, slot, job):
        return len(slot.cached)  # the slot already holds this prompt's media (an earlier turn, a saved state)
    reuse = 0 if job.media is not None else min(shared_prefix(slot, job), len(job.prompt) - 1)
    if not context.seq_trim(slot.seq_id, reuse):
        context.seq_trim(slot.seq_id, 0)
        reuse = 0
    slot.cached = job.prompt[:reuse]
    slot.pending = job.prompt[reuse:]
    slot.saved = min(slot.saved, reuse)
    slot.pos_offset = 0
    slot.media = job.media is not None
    if job.media is not None and (failed := prefill_media(context, slot, job)) is not None:
        return failed
    return reuse


def borrow_prefix(context: LlamaContext, slots: list[Slot], slot: Slot, job: ChatJob, kept: int) -> int:
    """In a unified pool, give a text prompt's slot the cells of the longest prefix of it another slot holds beyond
    the `kept` tokens of its own (another conversation's system prompt and tools; the echo guard's answer again
    without the tool list, which takes a free slot): shared, not prefilled. The prompt tokens the slot now holds."""
    if not context.shares_cells or job.media is not None or slot.media or slot.pos_offset:
        return kept
    donors = [other for other in slots if other is not slot and not other.media and not other.pos_offset]
    donor = max(donors, key=lambda other: shared_prefix(other, job), default=None)
    end = min(shared_prefix(donor, job), len(job.prompt) - 1) if donor is not None else 0
    if donor is None or end < kept + MIN_BORROWED:
        return kept
    context.seq_share(donor.seq_id, slot.seq_id, kept, end)
    if context.seq_pos_max(slot.seq_id) != end - 1:  # llama.cpp did not share them: prefilled as before
        context.seq_trim(slot.seq_id, kept)
        return kept
    slot.cached = job.prompt[:end]
    slot.pending = job.prompt[end:]
    return end


def reuse_media_head(context: LlamaContext, slot: Slot, job: ChatJob) -> bool:
    """Keep the slot's cells when they already hold all of this prompt's media and the text before it (same
    content ids, same places): the positions after the media are then the same too. False: evaluate anew."""
    media = job.media
    reuse = min(common_prefix(slot.cached, job.prompt), len(job.prompt) - 1)
    if not slot.media or reuse < media.head_tokens:
        return False
    if not context.seq_trim(slot.seq_id, reuse + slot.pos_offset):  # positions, not cells, after media
        return False
    media.close()
    slot.cached = job.prompt[:reuse]
    slot.pending = job.prompt[reuse:]
    return True


def prefill_media(context: LlamaContext, slot: Slot, job: ChatJob) -> HypnosError | None:
    """Evaluate a media prompt's chunks (all but its final text) into the slot's sequence with mtmd; the error
    the job fails with when that fails (the other jobs keep running), else None."""
    media = job.media
    try:
        position = media.eval_head(context.pointer, slot.seq_id, context.shape.n_batch)
    except Exception as error:
        logger.warning("mtmd prefill failed: %s", error)
        context.seq_trim(slot.seq_id, 0)
        slot.cached, slot.pending = [], []
        return server_error("the llama engine could not read the prompt's media")
    finally:
        media.close()
    slot.cached = job.prompt[: media.head_tokens]
    slot.pending = job.prompt[media.head_tokens :]
    slot.pos_offset = position - media.head_tokens
    return None
