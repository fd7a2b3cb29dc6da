"""Batch lines in the llama batch loop run only in what interactive answers leave: an interactive prompt prefills
alone, batch lines decode beside interactive streams only within the pace's share, and an interactive job is
admitted before the batch lines waiting ahead of it."""

from __future__ import annotations

from collections import deque

from hypnos_llama.prefill_pace import MIN_CHUNK, PrefillPace
from hypnos_llama.sampling import SamplingParams
from hypnos_llama.slots import ChatJob, Slot
from hypnos_llama.step_slots import next_job, step_slots

BATCH = -1


def job(priority: int = 0) -> ChatJob:
    return ChatJob(
        prompt=[1, 2, 3], max_tokens=8, required_ctx=64, sampling=SamplingParams(), emit=print, priority=priority
    )


def decoding(seq: int, priority: int = 0) -> Slot:
    return Slot(seq_id=seq, job=job(priority), next_token=7, first_token=1.0)


def prefilling(seq: int, priority: int = 0) -> Slot:
    return Slot(seq_id=seq, job=job(priority), pending=[4, 5, 6], admitted=float(seq))


def pace() -> PrefillPace:
    return PrefillPace(n_batch=512, chunk_beside=256, share=0.2, step_secs=1.0)


def test_an_interactive_prompt_prefills_without_the_batch_lines() -> None:
    lines = [decoding(0, BATCH), prefilling(1, BATCH)]
    mine = prefilling(2)
    step = step_slots([*lines, mine], pace())
    assert (step.generating, step.answering, step.prompts) == ([], [], [mine])
    assert not step.streaming  # its chunk is not cut for the batch lines' sake


def test_batch_lines_decode_beside_interactive_streams_within_the_share() -> None:
    timing = PrefillPace(n_batch=512, chunk_beside=256, share=0.25, step_secs=1.0)
    line, mine = decoding(0, BATCH), decoding(1)
    assert step_slots([line, mine], timing).generating == [mine]  # their step is measured alone first
    timing.record(0.0625, 0, streaming=True)
    step = step_slots([line, mine], timing)
    assert step.generating == [line, mine] and step.streaming and step.background
    timing.record(0.09375, 0, streaming=True, background=True)  # 31.25 ms more than their step alone
    alone = 0
    while step_slots([line, mine], timing).generating == [mine]:
        timing.record(0.0625, 0, streaming=True)
        alone += 1
    assert alone == 2  # 31.25 ms / (0.25 x 62.5 ms): their pace keeps 1 / 1.25 of itself at worst


def test_batch_lines_alone_run_as_any_requests() -> None:
    lines = [decoding(0, BATCH), decoding(1, BATCH), prefilling(2, BATCH)]
    step = step_slots(lines, pace())
    assert step.generating == lines[:2] and step.prompts == lines[2:] and step.streaming and not step.background


def test_a_batch_lines_prompt_alone_takes_short_chunks() -> None:
    timing = pace()
    timing.record(0.125, 128, streaming=False)  # 1,024 prompt tokens a second
    assert timing.budget(streaming=False) == 512
    assert timing.budget(streaming=False, background=True) == 256  # a quarter of the step time
    timing.record(16.0, 256, streaming=False)
    assert timing.budget(streaming=False, background=True) == MIN_CHUNK


def test_an_interactive_job_is_admitted_before_the_batch_lines_ahead() -> None:
    lines = [job(BATCH), job(BATCH)]
    mine = job()
    waiting = deque([*lines, mine])
    assert next_job(waiting) is mine and waiting[0] is mine
    waiting.popleft()
    assert next_job(waiting) is lines[0]
