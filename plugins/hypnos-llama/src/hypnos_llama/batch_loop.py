"""The batch loop: one worker thread per loaded model stepping every active slot with one llama_decode per step."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from hypnos.engine import ChatAccepted, ChatFinished, DeviceOutOfMemory
from hypnos.errors import HypnosError, server_error
from hypnos.kit.device_oom import llama_status_out_of_memory

from hypnos_llama.choice_output import ChoiceOutput, token_logprob
from hypnos_llama.echo_guard import ECHO, HOLD, roll_back
from hypnos_llama.prefill_pace import PrefillPace
from hypnos_llama.prompt_states import PromptStates, choose_slot
from hypnos_llama.runtime import LlamaContext, LlamaModel
from hypnos_llama.sampling import SlotSampler
from hypnos_llama.slot_cache import borrow_prefix, clear_idle_caches, keep_prefix, make_room, rebuild_carrying_cells
from hypnos_llama.slots import ChatJob, Slot, finished_event, send_event
from hypnos_llama.step_abort import ABORTED, AbortSwitch, put_back
from hypnos_llama.step_slots import interactive, next_job, step_slots
from hypnos_llama.thread_governor import IDLE_TICK_SECS, ThreadGovernor

logger = logging.getLogger(__name__)
_STOP = object()


class BatchLoop:
    """Owns a model's context on one thread: admits jobs into slots, steps them together, streams the results."""

    def __init__(
        self,
        model: LlamaModel,
        context: LlamaContext,
        rebuild: Callable[[int], LlamaContext],
        *,
        prefill_chunk: int,
        name: str,
        idle_timeout_s: float | None = None,
        last_token_alone: bool = False,
        prefill_share: float = 0.12,
        prefill_step_secs: float = 1.0,
        governor: ThreadGovernor | None = None,
        batch_threads: int | None = None,
    ) -> None:
        self.model = model
        self.governor = governor  # the threads of each step: the core share, less what contention costs
        self._batch_threads = batch_threads  # a configured cap on prompt-processing threads
        self.idle_timeout_s = idle_timeout_s
        self.context = context
        self._rebuild = rebuild
        self.pace = PrefillPace(context.shape.n_batch, prefill_chunk, prefill_share, prefill_step_secs)
        self.last_token_alone = last_token_alone
        self.slots = [Slot(seq_id=i) for i in range(context.shape.n_seq)]
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting: deque[ChatJob] = deque()
        self._thread = threading.Thread(target=self._run, name=f"llama-batch-{name}", daemon=True)
        self.steps = 0
        self.max_concurrent = 0
        self.max_prefill_beside_streams = 0
        self._ended: BaseException | None = None
        self.states: PromptStates | None = None  # the prompt cache, when the model uses one
        self.abort = AbortSwitch()  # an interactive job arriving aborts a step of batch lines only
        context.abort_when(self.abort.flag)

    # ---- called from other threads ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread."""
        self._thread.start()

    def submit(self, job: ChatJob) -> None:
        """Queue a job; it joins the running batch at the next step."""
        job.cancel.on_cancel(lambda: self.abort.cancelled(id(job)))
        self._inbox.put(job)
        if job.priority >= 0:
            self.abort.interactive_arrived()
        if self._ended is not None:  # the worker is gone: nobody else will answer it
            self._fail_inbox(self._ended)

    def stop(self) -> None:
        """Finish the thread (waiting jobs end with an error) and wait for it."""
        self._inbox.put(_STOP)
        self._thread.join()

    # ---- the worker thread -----------------------------------------------------------------------------------

    def _active(self) -> list[Slot]:
        return [s for s in self.slots if s.job is not None]

    def _run(self) -> None:
        try:
            while True:
                busy = bool(self._active() or self._waiting)
                if not self._drain_inbox(block=not busy):
                    break
                self._drop_cancelled()
                self._admit()
                if self._active():
                    self._step()
        except Exception:  # a broken context fails every request it holds
            logger.exception("llama batch loop failed")
            self._ended = server_error("the llama engine failed; the server log has the cause")
        else:
            self._ended = server_error("the model was unloaded while the request waited")
        self._fail_all(self._ended)

    def _drain_inbox(self, *, block: bool) -> bool:
        """Move submitted jobs into the waiting line; False when asked to stop."""
        self.abort.taken()
        try:
            if block and (self.idle_timeout_s or self.governor is not None):
                item = self._wait_idle()
            else:
                item = self._inbox.get() if block else self._inbox.get_nowait()
            while True:
                if item is _STOP:
                    return False
                self._waiting.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            return True

    def _wait_idle(self) -> Any:
        """Block for the next item; meanwhile clear empty slots idle longer than the timeout (kv_idle_timeout_secs)
        and let the thread governor sample other programs' CPU."""
        clear_every = self.idle_timeout_s / 4 if self.idle_timeout_s else float("inf")
        tick = min(clear_every, IDLE_TICK_SECS if self.governor is not None else clear_every)
        cleared = time.perf_counter()
        if self.governor is not None:
            self.governor.idle()
        while True:
            try:
                return self._inbox.get(timeout=tick)
            except queue.Empty:
                if self.governor is not None:
                    self.governor.idle()
                now = time.perf_counter()
                if self.idle_timeout_s and now - cleared >= clear_every:
                    cleared = now
                    clear_idle_caches(self.context, self.slots, used_before=now - self.idle_timeout_s, save=self._save)

    def _drop_cancelled(self) -> None:
        for job in [j for j in self._waiting if j.stopped()]:
            self._waiting.remove(job)
            cancelled = ChatFinished(
                finish_reason="cancelled", index=job.index, prompt_tokens=job.prompt_usage()[0], completion_tokens=0
            )
            send_event(job, cancelled)
        for slot in self._active():
            if slot.job is not None and slot.job.stopped():
                self._finish(slot, "cancelled")

    def _admit(self) -> None:
        """Admit waiting jobs in order while a slot and KV room are free (rebuilding the context when needed)."""
        while self._waiting:
            job = next_job(self._waiting)
            idle = [s for s in self.slots if s.job is None]
            if not idle:
                return
            if job.required_ctx > self.sequence_capacity:
                if self._active():
                    return  # the rebuild waits until the running requests are done
                job.context_ms = self._rebuild_context(job.required_ctx)
                if job.required_ctx > self.sequence_capacity:  # llama.cpp gave fewer cells than asked
                    self._waiting.popleft()
                    send_event(
                        job,
                        server_error(
                            f"the context holds {self.sequence_capacity} tokens per sequence; "
                            f"the request needs {job.required_ctx}"
                        ),
                    )
                continue
            if not self.context.unified:  # every sequence has its own cells
                self._waiting.popleft()
                self._start(choose_slot(idle, job), job)
                continue
            capacity = self.context.shape.n_ctx
            committed = sum(s.job.reserve for s in self._active() if s.job is not None)
            if committed + job.reserve > capacity:
                return
            self._waiting.popleft()
            slot = choose_slot(idle, job)
            make_room(self.context, self.slots, job, slot, capacity - committed, save=self._save)
            self._start(slot, job)

    @property
    def sequence_capacity(self) -> int:
        """The most cells one sequence may fill: the whole pool when unified, else its own share."""
        shape = self.context.shape
        return shape.n_ctx if self.context.unified else shape.n_ctx // shape.n_seq

    def _save(self, slot: Slot) -> None:
        """Save an idle slot's state to the prompt cache before its cells are cleared."""
        if self.states is not None:
            self.states.save(self.context, slot)

    def _start(self, slot: Slot, job: ChatJob) -> None:
        slot.admitted = time.perf_counter()
        slot.passed_over = 0
        if self.states is not None:  # save what the slot would lose; restore a saved state that shares more
            self.states.prepare(self.context, slot, job)
        reuse = keep_prefix(self.context, slot, job)
        if isinstance(reuse, HypnosError):
            send_event(job, reuse)
            return
        reuse = borrow_prefix(self.context, self.slots, slot, job, reuse)
        slot.job = job
        slot.scope = job.scope
        slot.reused = reuse
        slot.next_token = None
        slot.completion = 0
        slot.concurrent = 0
        slot.first_token = None
        slot.sampler = SlotSampler(self.model, job.sampling, job.prompt)
        slot.output = ChoiceOutput(job.index, job.stop)
        if job.usage is None:  # announced once: a restart (echo_guard) answers the same request
            job.usage = (len(job.prompt), reuse)
            send_event(job, ChatAccepted(prompt_tokens=len(job.prompt), cached_tokens=reuse, index=job.index))

    def _rebuild_context(self, required: int) -> float:
        """Replace the context with one of at least `required` cells, the slots' cells carried over (a cached
        conversation is not prefilled again because a request asked for more room); returns the milliseconds."""
        started = time.perf_counter()
        self.context = rebuild_carrying_cells(self.context, self.slots, lambda: self._rebuild(required))
        self.context.abort_when(self.abort.flag)
        elapsed = (time.perf_counter() - started) * 1000
        logger.info("llama context rebuilt to %d cells in %.1f ms", self.context.shape.n_ctx, elapsed)
        return elapsed

    def _step(self) -> None:
        """Build one batch (a token per answering slot, then prompt chunks as the pace allows) and decode it."""
        context = self.context
        context.batch_clear()
        outputs: list[tuple[Slot, int]] = []
        active = self._active()
        before = {slot.seq_id: len(slot.cached) for slot in active}
        generating, answering, prompts, streaming, background = step_slots(active, self.pace)
        for slot in generating:
            token = slot.next_token
            assert token is not None
            outputs.append((slot, context.batch_add(token, len(slot.cached) + slot.pos_offset, slot.seq_id, True)))
            slot.cached.append(token)
        budget = context.shape.n_batch - len(generating)
        stepped = list(generating)
        # tokens inserted into an answer (after its first token) go first; prompts then share the pace's chunk
        for slot in answering:
            budget -= self._add_pending(slot, budget, outputs)
            stepped.append(slot)
        chunk = min(budget, self.pace.budget(streaming, not interactive(prompts[0]))) if prompts else 0
        prefilled = 0
        for slot in prompts:
            slot.passed_over += prefilled  # what this step gave the prompts put ahead of it
            if chunk - prefilled <= 0:
                continue
            stepped.append(slot)
            prefilled += self._add_pending(slot, chunk - prefilled, outputs)
        threads = 0
        if self.governor is not None:
            threads = self.governor.next_threads()
            context.set_threads(threads, min(threads, self._batch_threads or threads))
        # a step of batch lines alone stops when an interactive job arrives that a free slot can take; any step with
        # more threads than a new core share allows stops too
        batch_only = not any(interactive(s) for s in stepped) and any(s.job is None for s in self.slots)
        prompting = [slot.job for slot in stepped if slot in prompts and slot.job is not None]
        gone = any(job.stopped() for job in prompting)  # cancelled since the loop dropped the cancelled jobs
        self.abort.arm(batch_only, threads, frozenset(id(job) for job in prompting), gone)
        started = time.perf_counter()
        status = context.decode()
        if status == 1 and clear_idle_caches(self.context, self.slots):  # no KV room: drop idle prefixes, retry once
            status = context.decode()
        self.abort.disarm()
        if status == ABORTED:  # what the step did not keep is fed again after the interactive job's prefill
            put_back(context, stepped, before, {slot.seq_id for slot, _ in outputs})
            self.abort.aborted += 1
            return
        if status != 0:
            self._decode_failed(status, active)
            return
        if prompts or streaming:
            self.pace.record(time.perf_counter() - started, prefilled, streaming, background)
        if self.governor is not None and not prefilled and not answering:  # decode steps alone judge the threads
            self.governor.record(time.perf_counter() - started, len(generating))
        self.steps += 1
        if generating:
            self.max_prefill_beside_streams = max(self.max_prefill_beside_streams, prefilled)
        self.max_concurrent = max(self.max_concurrent, len(stepped))
        for slot in stepped:
            slot.concurrent = max(slot.concurrent, len(stepped))
        for slot, index in outputs:
            if slot.job is not None and slot.job.echo_guard is not None:
                slot.job.echo_guard.ban(self.model, context, index, slot.completion)
            token = slot.sampler.sample(context.pointer, index)
            top = slot.job.top_logprobs if slot.job is not None else None
            logprob = None if top is None else token_logprob(self.model, context, index, token, top)
            self._accept(slot, token, logprob)

    def _add_pending(self, slot: Slot, budget: int, outputs: list[tuple[Slot, int]]) -> int:
        """Add up to `budget` of the slot's pending tokens to the batch (the last one's logits when it ends them);
        how many were added."""
        # With last_token_alone (deterministic_prefill) the prompt's last token decodes in a step of its own, as it
        # does after a full prefix hit: its logits then come from the same kernels whether or not the prefix was
        # cached (same seed, same answer), at the cost of one more llama_decode before the first token. By default
        # it goes with the rest of the prompt.
        if budget <= 0:
            return 0
        alone = self.last_token_alone and len(slot.pending) > 1
        take = slot.pending[: min(budget, len(slot.pending) - 1)] if alone else slot.pending[:budget]
        slot.pending = slot.pending[len(take) :]
        context = self.context
        for offset, token in enumerate(take):
            last = not slot.pending and offset == len(take) - 1
            index = context.batch_add(token, len(slot.cached) + slot.pos_offset, slot.seq_id, last)
            slot.cached.append(token)
            if last:
                outputs.append((slot, index))
        return len(take)

    def _decode_failed(self, status: int, active: list[Slot]) -> None:
        """Undo this step's tokens and fail the requests it held."""
        error: HypnosError = server_error(f"llama_decode failed with status {status} (context full or invalid batch)")
        if llama_status_out_of_memory(status):  # the device's memory: 507, idle models evicted and the call retried
            error = DeviceOutOfMemory(f"llama_decode could not allocate device memory (status {status})")
        for slot in active:
            assert slot.job is not None
            job = slot.job
            slot.cached = []
            self.context.seq_trim(slot.seq_id, 0)
            self._release(slot)
            send_event(job, error)

    def _accept(self, slot: Slot, token: int, logprob: Any = None) -> None:
        """Handle a sampled token: stop at EOG or a stop string, stream its text, stop at max_tokens."""
        job = slot.job
        assert job is not None
        now = time.perf_counter()
        if slot.first_token is None:
            slot.first_token = now
        if self.model.is_eog(token):
            guard = job.echo_guard
            if (
                guard is not None
                and guard.ends_empty(token, slot.completion)
                and roll_back(self.context, self.model, slot)
            ):
                guard.retry()  # an answer given again after a restated call may not be empty either
                return
            self._finish(slot, "stop")
            return
        slot.completion += 1
        text, delta, stopped = slot.output.feed(self.model.piece(token), logprob)
        if job.echo_guard is not None and job.echo_guard.deciding:
            verdict = job.echo_guard.feed(token, text, delta)
            if verdict == ECHO and (bare := job.echo_guard.restart()) is not None:
                self._restart(slot, bare)  # the answer restated a call: answered again without the tool list
                return
            if verdict == ECHO and roll_back(self.context, self.model, slot):
                job.echo_guard.retry()  # the answer restated a call: sampled again from its start
                return
            job.echo_guard.deciding = verdict == HOLD
            delta = None
            for held in job.echo_guard.release() if verdict != HOLD else []:
                send_event(job, held)
        if delta is not None:
            send_event(job, delta)
        if stopped:
            self._finish(slot, "stop", flush=False)
            return
        if text:
            if job.thinking_guard is not None and (close := job.thinking_guard.after_text(text)) is not None:
                job.inject(*close)
        if slot.completion >= job.max_tokens or len(slot.cached) + 1 > job.reserve:
            self._finish(slot, "length")
            return
        injection = job.take_injection()
        if injection is not None:
            forced, forced_text = injection
            if slot.completion + len(forced) >= job.max_tokens or len(slot.cached) + 1 + len(forced) > job.reserve:
                self._finish(slot, "length")
                return
            # The sampled token and the inserted ones decode together; the last one's logits give the next token.
            inserted = slot.output.insert(forced_text)
            if inserted is not None:
                send_event(job, inserted)
            slot.completion += len(forced)
            slot.pending = [token, *forced]
            slot.next_token = None
            return
        slot.next_token = token

    def _finish(self, slot: Slot, reason: str, *, flush: bool = True) -> None:
        job = slot.job
        assert job is not None
        for held in job.echo_guard.release() if job.echo_guard is not None else []:
            send_event(job, held)
        tail = slot.output.flush() if slot.output is not None and flush and reason != "cancelled" else None
        if tail is not None:
            send_event(job, tail)
        finished = finished_event(slot, job, reason)
        self._release(slot)
        send_event(job, finished)
        if self.states is not None and reason != "cancelled":  # a long new prompt is kept (disk: past a restart)
            self.states.finished(self.context, slot)

    def _restart(self, slot: Slot, prompt: list[int]) -> None:
        """Give the slot's job a new prompt (nothing of its answer went out): it waits first in line, and its slot
        keeps what it holds as a prefix to reuse."""
        job = slot.job
        assert job is not None
        self._release(slot)
        job.required_ctx = max(job.required_ctx, len(prompt) + 1)
        job.prompt = prompt
        self._waiting.appendleft(job)

    def _release(self, slot: Slot) -> None:
        if slot.sampler is not None:
            slot.sampler.free()
        slot.sampler = None
        slot.output = None
        slot.job = None
        slot.pending = []
        slot.next_token = None
        slot.last_used = time.perf_counter()

    def _fail_all(self, error: BaseException) -> None:
        for slot in self._active():
            job = slot.job
            assert job is not None
            self._release(slot)
            send_event(job, error)
        while self._waiting:
            send_event(self._waiting.popleft(), error)
        self._fail_inbox(error)

    def _fail_inbox(self, error: BaseException) -> None:
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, ChatJob):
                send_event(item, error)
