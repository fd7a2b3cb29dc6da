"""Thinking blocks: the delimiters a model family wraps its thoughts in, and the budgets of reasoning_effort."""

from __future__ import annotations

from dataclasses import dataclass

EFFORT_BUDGETS = {"minimal": 512, "low": 512, "medium": 2048, "high": 6144}


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


def thinking_budget(think: bool | None, reasoning_effort: str | None) -> tuple[bool, int | None]:
    """(thinking on?, token budget or None for unbounded) from the request's think and reasoning_effort."""
    if reasoning_effort is not None:
        effort = reasoning_effort.strip().lower()
        if effort == "none":
            return False, 0
        if effort in EFFORT_BUDGETS:
            return True, EFFORT_BUDGETS[effort]
    return bool(think), None
