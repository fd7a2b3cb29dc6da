"""describe_pictures: each picture described by a vision model, reached through a lease on its id."""

from __future__ import annotations

import re
from typing import Any

from hypnos.chat import ChatInput, ImagePart, InputMessage, MessagePart, TextPart
from hypnos.engine import ContentDelta
from hypnos.types import Modality
from hypnos_server.plugin_api import ModelLeases

from hypnos_docling.events import Picture

PLACEHOLDER = "<!-- image -->"
MAX_TOKENS = 200


async def describe(leases: ModelLeases, model: str, prompt: str, picture: Picture) -> str:
    """The vision model's description of one picture (a chat request with the image, as any client would send)."""
    parts_in: list[MessagePart] = [TextPart(text=prompt), ImagePart(data=picture.png or b"", mime="image/png")]
    chat = ChatInput(messages=[InputMessage(role="user", parts=parts_in)], max_tokens=MAX_TOKENS)
    parts: list[str] = []
    async with leases.lease(model, Modality.VISION) as lease:
        async for event in lease.engine.chat(chat, lease.cancel):
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
