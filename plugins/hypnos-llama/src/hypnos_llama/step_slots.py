"""Which slots a batch loop step takes: beside interactive answers, batch lines run only in what those leave."""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from hypnos_llama.prefill_pace import PrefillPace
from hypnos_llama.slots import ChatJob, Slot


class StepSlots(NamedTuple):
    """One step's slots and how the pace sees it."""

    generating: list[Slot]  # a sampled token to decode
    answering: list[Slot]  # tokens inserted into an answer
    prompts: list[Slot]  # prompts to prefill, in prefill_order
    streaming: bool  # answers stream beside this step's prefill (the interactive ones, when any runs)
    background: bool  # batch lines decode in it beside interactive streams


def interactive(slot: Slot) -> bool:
    """Whether the slot's job is an interactive request (not a batch line)."""
    return slot.job is None or slot.job.priority >= 0


def next_job(waiting: deque[ChatJob]) -> ChatJob:
    """The job to admit next, moved to the front of the line: the first interactive one, else the first."""
    for job in waiting:
        if job.priority >= 0:
            if job is not waiting[0]:
                waiting.remove(job)
                waiting.appendleft(job)
            return job
    return waiting[0]


def prefill_order(prompts: list[Slot]) -> list[Slot]:
    """The prompts in the order a step's chunk goes to them: the fewest tokens left to prefill first, less the
    tokens already prefilled for prompts put ahead of each (then the oldest admitted). A prompt nearly all cached
    (an agent's next turn) or short goes before a long one admitted just before it instead of waiting out its whole
    prefill, and a long prompt passed over gains on newcomers by what they took, so others' prefill delays it by at
    most about its own length."""
    return sorted(prompts, key=lambda s: (len(s.pending) - s.passed_over, s.admitted))


def step_slots(active: list[Slot], pace: PrefillPace) -> StepSlots:
    """The slots of the next step. Beside interactive answers a batch line (priority below 0) runs only in what
    they leave: not at all while an interactive prompt prefills, else as far as the pace's credit allows."""
    generating = [s for s in active if not s.pending and s.next_token is not None]
    answering = [s for s in active if s.pending and s.first_token is not None]
    prompts = prefill_order([s for s in active if s.pending and s.first_token is None])
    everything = StepSlots(generating, answering, prompts, bool(generating or answering), False)
    if all(interactive(s) for s in active) or not any(interactive(s) for s in active):
        return everything
    prefilling = any(interactive(s) for s in prompts)
    lend = not prefilling and pace.lends()
    kept = StepSlots(
        [s for s in generating if lend or interactive(s)],
        [s for s in answering if lend or interactive(s)],
        [s for s in prompts if not prefilling or interactive(s)],
        False,
        False,
    )
    stepping = (*kept.generating, *kept.answering)
    if not stepping and not kept.prompts:  # the interactive answers have nothing to step: the batch lines go on
        return everything
    streaming = any(interactive(s) for s in stepping)
    background = streaming and not all(interactive(s) for s in stepping)
    return kept._replace(streaming=streaming, background=background)
