"""Turning the model's raw text into chat events; the seam where per-family tool-call and thinking parsers plug in."""

from __future__ import annotations

from typing import Protocol

from hypnos.engine import ChatEvent, ContentDelta
from hypnos.openai import ChatCompletionRequest


class OutputParser(Protocol):
    """Reads the generated text piece by piece and says what the client sees (content, reasoning, tool calls)."""

    def feed(self, text: str) -> list[ChatEvent]:
        """Events for one more piece of generated text."""
        ...

    def finish(self) -> list[ChatEvent]:
        """Events held back until the end (a tool call completes only when its block closes)."""
        ...


class PlainTextOutput:
    """Every piece is answer text (models without a thinking or tool-call format)."""

    def feed(self, text: str) -> list[ChatEvent]:
        """One ContentDelta per piece."""
        return [ContentDelta(text)] if text else []

    def finish(self) -> list[ChatEvent]:
        """Nothing is held back."""
        return []


def output_parser_for(architecture: str, template: str, request: ChatCompletionRequest) -> OutputParser:
    """The parser for a model family and request (tools, thinking); plain text until the family parsers land."""
    return PlainTextOutput()
