"""Aborting a llama_decode (a batch-only one when an interactive job arrives, any one when the core share falls under
its threads, one prefilling a prompt whose request is cancelled), and putting back what the aborted step lost.

llama.cpp's CPU backend calls the context's abort callback after every graph node. The callback is libc's `strlen`
over a 2-byte buffer (no Python, no GIL in the step): an empty string (0) lets the step go on, "x" (1) aborts it.
An aborted llama_decode (status 2) keeps the ubatches it finished and removes the positions of the one it stopped
in, so the loop asks the memory what each sequence kept and feeds the rest again in a later step.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Iterable
from typing import Any

from hypnos_llama.slots import Slot

ABORTED = 2  # llama_decode's status when the abort callback stopped it
NARROW_WAIT_SECS = 0.25  # a smaller core share waits at most this long for the aborted step to end


class AbortSwitch:
    """Lets any thread abort the step under way: while it holds only batch lines (an interactive job arrived), or
    while it runs more threads than the core share now allows."""

    def __init__(self) -> None:
        self.flag = ctypes.create_string_buffer(2)  # b"" goes on, b"x" aborts (strlen 0 or 1)
        self._lock = threading.Lock()
        self._armed = False  # the step under way may be aborted (no interactive work in it)
        self._arrived = False  # an interactive job came since the loop last took its inbox
        self.aborted = 0  # steps aborted so far
        self._threads = 0  # the threads of the step under way (0 between steps)
        self._prompts: frozenset[int] = frozenset()  # the jobs (ids) whose prompt chunks the step under way holds
        self._between = threading.Event()  # set while no step is under way
        self._between.set()

    def interactive_arrived(self) -> None:
        """An interactive job was queued: abort the step under way when it may be (any thread)."""
        with self._lock:
            self._arrived = True
            if self._armed:
                self.flag[0] = b"x"

    def taken(self) -> None:
        """The loop is about to take its inbox: the jobs that came so far are seen (the loop's thread)."""
        with self._lock:
            self._arrived = False

    def arm(self, abortable: bool, threads: int = 0, prompts: frozenset[int] = frozenset(), gone: bool = False) -> None:
        """Before a step of `threads` threads: whether an interactive job may abort it (aborted at once when one came
        after the inbox was taken), and the jobs whose prompt chunks it holds (`gone`: one is cancelled already)."""
        with self._lock:
            self._armed, self._threads, self._prompts = abortable, threads, prompts
            self._between.clear()
            self.flag[0] = b"x" if (abortable and self._arrived) or gone else b"\0"

    def disarm(self) -> None:
        """After a step: nothing aborts until the next one is armed."""
        with self._lock:
            self._armed, self._threads, self._prompts = False, 0, frozenset()
            self.flag[0] = b"\0"
            self._between.set()

    def cancelled(self, job: int) -> None:
        """Job `job` (its id) was cancelled (any thread): the step under way stops when it prefills that job's prompt.
        A chunk deep in a long prompt on a crowded CPU ran past the 10 s cancel grace, and the engine host was
        killed with every request on it (Qwen Code's 16,831-token prompt, its client gone after 240 s)."""
        with self._lock:
            if job in self._prompts:
                self.flag[0] = b"x"

    def narrow(self, threads: int) -> bool:
        """The core share fell to `threads` (any thread): a step under way with more threads is aborted (crowded onto
        fewer cores, its threads wait for each other at every graph node for seconds); True when one was."""
        with self._lock:
            if self._threads <= threads:
                return False
            self.flag[0] = b"x"
            return True

    async def narrowed(self, threads: int) -> None:
        """narrow(), then wait until the aborted step ended (at most NARROW_WAIT_SECS)."""
        if self.narrow(threads):
            await asyncio.to_thread(self._between.wait, NARROW_WAIT_SECS)


def kept_tokens(context: Any, slot: Slot) -> int:
    """How many of the slot's tokens its sequence holds in the memory (after an aborted step)."""
    last = context.seq_pos_max(slot.seq_id)
    return last + 1 - slot.pos_offset


def put_back(context: Any, stepped: Iterable[Slot], before: dict[int, int], outputs: set[int]) -> None:
    """Undo what an aborted step did not keep: each slot's tokens past what its sequence holds go back to pending
    (a sampled token back to next_token); a slot whose logits the step owed keeps its last token unfed, so the step
    that feeds it again gives them. `before`: each slot's cached length before the step (by seq_id); `outputs`: the
    seq_ids whose logits the step asked for."""
    for slot in stepped:
        start = before[slot.seq_id]
        keep = max(start, min(kept_tokens(context, slot), len(slot.cached)))
        if slot.seq_id in outputs:
            keep = min(keep, len(slot.cached) - 1)
        context.seq_trim(slot.seq_id, keep + slot.pos_offset)
        again = slot.cached[keep:]
        del slot.cached[keep:]
        if slot.next_token is not None and again == [slot.next_token] and not slot.pending:
            continue  # a generating slot: its sampled token is fed again as it was
        slot.pending = [*again, *slot.pending]
