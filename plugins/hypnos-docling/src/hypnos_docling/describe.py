"""describe_pictures: each picture described by a vision model, reached through a scheduler lease on its id."""

from __future__ import annotations

import base64
import re
from typing import Any

import msgspec
from hypnos.engine import ChatOptions, ContentDelta
from hypnos.openai import ChatCompletionRequest
from hypnos.scheduler import Scheduler
from hypnos.types import Modality

from hypnos_docling.events import Picture

PLACEHOLDER = "<!-- image -->"
MAX_TOKENS = 200


async def describe(scheduler: Scheduler, model: str, prompt: str, picture: Picture) -> str:
    """The vision model's description of one picture (a chat request with the image, as any client would send)."""
    url = "data:image/png;base64," + base64.b64encode(picture.png or b"").decode("ascii")
    content = [{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}]
    request = msgspec.convert(
        {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS},
        ChatCompletionRequest,
    )
    parts: list[str] = []
    async with scheduler.lease(model, Modality.VISION) as lease:
        async for event in lease.engine.chat(request, ChatOptions(max_tokens=MAX_TOKENS), lease.cancel):
            if isinstance(event, ContentDelta):
                parts.append(event.text)
    return " ".join("".join(parts).split())


def insert_descriptions(markdown: str, descriptions: list[str | None]) -> str:
    """Each description as `> **Picture:** …` under its picture's placeholder, in order."""
    pieces = markdown.split(PLACEHOLDER)
    out: list[Any] = [pieces[0]]
    for index, piece in enumerate(pieces[1:]):
        text = descriptions[index] if index < len(descriptions) else None
        out.append(PLACEHOLDER)
        if text:
            out.append(f"\n\n> **Picture:** {text}")
        out.append(piece)
    return re.sub(r"\n{3,}", "\n\n", "".join(out))
