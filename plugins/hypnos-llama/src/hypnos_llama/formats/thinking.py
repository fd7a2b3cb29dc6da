"""Thinking blocks: the delimiters a model family wraps its thoughts in (budgets come in the ChatInput)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ThinkingFormat:
    """A family's thinking delimiters; `close_text` is what the server inserts to end a block."""

    name: str
    open: str
    close: str

    @property
    def close_text(self) -> str:
        """The text that closes a thinking block and lets the model answer."""
        return f"\n{self.close}\n\n"


THINK_TAGS = ThinkingFormat("think_tags", "<think>", "</think>")


def detect_thinking_format(chat_template: str | None) -> ThinkingFormat | None:
    """The thinking format a chat template uses, or None for a model that does not think."""
    if chat_template and THINK_TAGS.open in chat_template and THINK_TAGS.close in chat_template:
        return THINK_TAGS
    return None
