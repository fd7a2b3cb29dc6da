"""Text the request log keeps at debug: a chat's messages as `role: text` lines."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def prompt_text(messages: Iterable[Any]) -> str:
    """`role: text` per message (the text parts only; images and audio are left out)."""
    lines = []
    for message in messages:
        text = message.text() if callable(getattr(message, "text", None)) else str(getattr(message, "content", ""))
        lines.append(f"{getattr(message, 'role', '?')}: {text}")
    return "\n".join(lines)
