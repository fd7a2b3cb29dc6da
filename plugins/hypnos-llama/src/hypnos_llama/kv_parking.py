"""KV parking for the llama engine: idle slots' KV states saved to host memory when the model leaves tier 1, and put
back into the same sequences when it returns with the same context layout (section 14)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hypnos.engine import KvPark, ParkedSlot

from hypnos_llama.options import LlamaOptions

if TYPE_CHECKING:
    from hypnos_llama.batch_loop import BatchLoop
    from hypnos_llama.runtime import LlamaContext

logger = logging.getLogger(__name__)


def context_layout(weights: Path, options: LlamaOptions, context: LlamaContext) -> tuple[Any, ...]:
    """What a parked state must match to be restored: the weights file, the context window, slots and KV types."""
    stat = weights.stat()
    return (
        str(weights.resolve()),
        stat.st_size,
        stat.st_mtime_ns,
        context.shape.n_ctx,
        context.shape.n_seq,
        options.type_k,
        options.type_v,
        options.kv_unified,
    )


def park_slots(store: KvPark | None, model_id: str, layout: tuple[Any, ...], batch: BatchLoop) -> int:
    """Save every idle slot holding a conversation (the loop is stopped); returns the slots parked."""
    if store is None or not store.enabled:
        return 0
    parked = []
    for slot in batch.slots:
        if slot.job is not None or not slot.cached:
            continue
        state = batch.context.seq_state(slot.seq_id)
        if state:  # media cells carry content ids in `cached`, and their positions in pos_offset
            parked.append(
                ParkedSlot(
                    seq_id=slot.seq_id, tokens=list(slot.cached), state=state, extra=(slot.media, slot.pos_offset)
                )
            )
    if parked and store.park(model_id, layout, parked):
        logger.info("parked %d slots of %s (%d tokens)", len(parked), model_id, sum(len(p.tokens) for p in parked))
        return len(parked)
    return 0


def restore_slots(
    store: KvPark | None, model_id: str, layout: tuple[Any, ...], batch: BatchLoop
) -> tuple[float, int] | None:
    """Put the model's parked slots back before the loop starts; (milliseconds, tokens restored), or None when
    nothing was parked for this layout."""
    if store is None:
        return None
    started = time.perf_counter()
    parked = store.take(model_id, layout)
    if not parked:
        return None
    tokens = 0
    for item in parked:
        if item.seq_id >= len(batch.slots):
            continue
        if not batch.context.set_seq_state(item.seq_id, item.state):
            batch.context.seq_trim(item.seq_id, 0)  # refused: this conversation prefills again
            continue
        slot = batch.slots[item.seq_id]
        slot.cached = list(item.tokens)
        slot.media, slot.pos_offset = item.extra if item.extra else (False, 0)
        slot.last_used = time.perf_counter()
        tokens += len(item.tokens)
    return (time.perf_counter() - started) * 1000, tokens
