"""Helpers for the engine-host tests: a scheduler over fake models in host processes, requests, pids."""

from __future__ import annotations

from typing import Any

from hypnos.chat import InputMessage, TextPart
from hypnos.engine import ChatInput
from hypnos.hosting import HostedEngine
from hypnos.scheduler import Scheduler
from hypnos.types import Modality
from sched_kit import fake_model, make_scheduler


def hosted_scheduler(models: list[dict[str, Any]], **kwargs: Any) -> Scheduler:
    """A scheduler whose fake models run in engine host processes."""
    return make_scheduler(models, server={"isolation": "process", "shutdown_grace_secs": 5.0}, **kwargs)


def hosted_model(model_id: str, **fake: Any) -> dict[str, Any]:
    """A fake chat model (every modality) with a fast watchdog."""
    process = fake.pop("process", {})
    fake.setdefault("layer_mib", 1)
    entry = fake_model(model_id, **fake)
    entry["modalities"] = [modality.value for modality in Modality]
    entry["process"] = {"hang_secs": 2.0, "cancel_grace_secs": 1.0, **process}
    return entry


def chat_input(text: str = "hello there", max_tokens: int = 8) -> ChatInput:
    """A one-message chat."""
    return ChatInput(messages=[InputMessage(role="user", parts=[TextPart(text=text)])], max_tokens=max_tokens)


async def chat_text(scheduler: Scheduler, model_id: str, text: str = "hello there") -> str:
    """The whole answer of one chat through a lease."""
    pieces = []
    async with scheduler.lease(model_id, Modality.TEXT_GENERATION) as lease:
        async for event in lease.engine.chat(chat_input(text), lease.cancel):
            pieces.append(getattr(event, "text", ""))
    return "".join(pieces)


def host_pid(scheduler: Scheduler, model_id: str) -> int | None:
    """The pid of the model's engine host (None while none runs)."""
    engine = scheduler.get(model_id).engine
    assert isinstance(engine, HostedEngine)
    info = engine.process_info()
    return None if info is None else info.pid


def alive(pid: int) -> bool:
    """Whether a process (not a zombie) with this pid exists."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
