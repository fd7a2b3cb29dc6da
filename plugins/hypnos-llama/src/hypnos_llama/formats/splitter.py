"""Splits a model's streamed text into reasoning, answer text and whole tool calls, holding back partial markers."""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from hypnos.engine import ContentDelta, ReasoningDelta, ToolCallEvent
from hypnos.openai import ToolCall, ToolCallFunction

from hypnos_llama.formats.call_arguments import ArgumentRules, cleaned_arguments
from hypnos_llama.formats.thinking import ThinkingFormat
from hypnos_llama.formats.tool_formats import (
    BARE,
    ParsedCall,
    Region,
    ToolCallFormat,
    bare_calls,
    bare_start,
    canonical,
    declared_name,
)

SplitEvent = ContentDelta | ReasoningDelta | ToolCallEvent


def _held_suffix(text: str, markers: list[str]) -> int:
    """Length of the longest end of `text` that could be the start of one of `markers`."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if marker.startswith(text[-size:]):
                longest = size
                break
    return longest


class OutputSplitter:
    """Feed decoded text pieces; get ContentDelta / ReasoningDelta / ToolCallEvent events in order.

    `in_reasoning` starts True when the prompt already opened a thinking block. Call regions that do not
    parse, or call a function not in `tool_names` (when given), come back as text without the format's markers.
    A call equal to one of `echoes` (after a tool result: the calls it answers) is text: small models echo
    the call they made. Arguments no caller can mean are left out (`argument_rules`). An answer
    that starts as a bare JSON call (`{"name":`, any family) is held to its end and is a call when it parses.
    Leading whitespace of the answer and whitespace between calls is dropped.
    """

    def __init__(
        self,
        tool_format: ToolCallFormat | None = None,
        thinking: ThinkingFormat | None = None,
        *,
        in_reasoning: bool = False,
        call_id_prefix: str | None = None,
        tool_names: frozenset[str] | None = None,
        echoes: frozenset[tuple[str, str]] = frozenset(),
        argument_rules: Mapping[str, ArgumentRules] | None = None,
    ) -> None:
        self.tool_format = tool_format
        self.tool_names = tool_names
        self.echoes = echoes
        self.argument_rules = argument_rules or {}  # what each call's arguments are cleaned by
        self.thinking = thinking
        self.in_reasoning = in_reasoning and thinking is not None
        self.calls: list[ParsedCall] = []
        self._call_prefix = call_id_prefix or f"call_{secrets.token_hex(6)}"
        self._buffer = ""
        self._region: Region | None = None
        self._answer_started = False
        self._pending_space = ""
        self._reasoning_started = False
        self._bare_checked = tool_format is None

    # ---- public -------------------------------------------------------------------------------------------------

    @property
    def reasoning_seen(self) -> bool:
        """True once any thinking text was produced."""
        return self._reasoning_started

    def feed(self, text: str) -> list[SplitEvent]:
        """Consume a piece of output; return the events it completes."""
        self._buffer += text
        events: list[SplitEvent] = []
        while self._step(events):
            pass
        return events

    def finish(self) -> list[SplitEvent]:
        """End of output: flush what was held back (an unclosed region is parsed if it can be)."""
        events: list[SplitEvent] = []
        while self._step(events):
            pass
        if self._region is not None:
            self._close_region(self._buffer, events, closed=False)
        elif self.in_reasoning:
            self._reasoning(self._buffer, events)
        else:
            self._content(self._buffer, events)
        self._buffer = ""
        self._region = None
        return events

    # ---- state machine ------------------------------------------------------------------------------------------

    def _step(self, events: list[SplitEvent]) -> bool:
        """Advance once; True when the buffer changed state and another step may progress."""
        if self._region is not None:
            close = self._region.close
            if close is None or close not in self._buffer:
                return False
            inner, _, rest = self._buffer.partition(close)
            self._buffer = rest
            self._close_region(inner, events, closed=True)
            return True
        if self.in_reasoning:
            assert self.thinking is not None
            close = self.thinking.close
            if close in self._buffer:
                thought, _, rest = self._buffer.partition(close)
                self._reasoning(thought, events)
                self.in_reasoning = False
                self._buffer = rest
                return True
            keep = _held_suffix(self._buffer, [close])
            self._reasoning(self._buffer[: len(self._buffer) - keep], events)
            self._buffer = self._buffer[len(self._buffer) - keep :]
            return False
        if not self._bare_checked and not self._answer_started and not self.calls:
            starts = bare_start(self._buffer)
            if starts is None:
                return False  # may still become a bare call: hold it
            self._bare_checked = True
            if starts:
                self._region = BARE
                return True
        openers = self._openers()
        found = [(self._buffer.find(marker), marker) for marker in openers]
        found = [(index, marker) for index, marker in found if index >= 0 and self._may_open(index, marker)]
        if found:
            index, marker = min(found)
            self._content(self._buffer[:index], events)
            self._buffer = self._buffer[index + len(marker) :]
            if self.thinking is not None and marker == self.thinking.open:
                self.in_reasoning = True
            elif self.thinking is not None and marker == self.thinking.close:
                pass  # a stray close (the model closed its block as the server did): never shown
            else:
                self._region = self._region_for(marker)
            return True
        keep = _held_suffix(self._buffer, openers)
        self._content(self._buffer[: len(self._buffer) - keep], events)
        self._buffer = self._buffer[len(self._buffer) - keep :]
        return False

    def _openers(self) -> list[str]:
        markers = [region.open for region in self.tool_format.regions] if self.tool_format else []
        if self.thinking is not None:
            markers.append(self.thinking.close)
            if not self._answer_started and not self.calls:
                markers.append(self.thinking.open)
        return markers

    def _may_open(self, index: int, marker: str) -> bool:
        """A thinking block opens only before any answer text; call regions open anywhere."""
        if self.thinking is not None and marker == self.thinking.open:
            return not self._buffer[:index].strip()
        return True

    def _region_for(self, marker: str) -> Region:
        assert self.tool_format is not None
        return next(region for region in self.tool_format.regions if region.open == marker)

    def _close_region(self, inner: str, events: list[SplitEvent], *, closed: bool) -> None:
        region = self._region
        assert region is not None and self.tool_format is not None
        self._region = None
        rest = ""
        if region is BARE:
            calls, rest = bare_calls(inner)
        else:
            calls = self.tool_format.parse_region(region, inner)
        if self.tool_names is not None:  # a name spelled in another letter case is the declared function's
            calls = [
                ParsedCall(declared_name(call.name, self.tool_names) or call.name, call.arguments) for call in calls
            ]
        calls = [
            ParsedCall(call.name, cleaned_arguments(call.name, call.arguments, self.argument_rules)) for call in calls
        ]
        if calls and self.tool_names is not None and any(call.name not in self.tool_names for call in calls):
            self._content(inner.strip(), events)  # a call to an undeclared function is never a tool call
            return
        if calls and self.echoes and all(_echo(call) in self.echoes for call in calls):
            self._content((region.open + inner).strip(), events)  # the answered call echoed: text, as written
            return
        if not calls:
            raw = region.open + inner + (region.close or "" if closed else "")
            self._content(raw, events)
            return
        for call in calls:
            self.calls.append(call)
            call_id = f"{self._call_prefix}_{len(self.calls)}"
            function = ToolCallFunction(name=call.name, arguments=call.arguments)
            events.append(ToolCallEvent(ToolCall(id=call_id, function=function)))
        self._pending_space = ""
        self._content(rest, events)

    def _reasoning(self, text: str, events: list[SplitEvent]) -> None:
        if not self._reasoning_started:
            text = text.lstrip()
        if text:
            self._reasoning_started = True
            events.append(ReasoningDelta(text))

    def _content(self, text: str, events: list[SplitEvent]) -> None:
        if not text:
            return
        if not text.strip():
            if self._answer_started:
                self._pending_space += text
            return
        if not self._answer_started:
            text = text.lstrip()
            self._answer_started = True
        body = text.rstrip()
        events.append(ContentDelta(self._pending_space + body))
        self._pending_space = text[len(body) :]


def _echo(call: ParsedCall) -> tuple[str, str]:
    return call.name, canonical(call.arguments)


def split_text(tool_format: ToolCallFormat, text: str) -> tuple[str, list[ParsedCall]]:
    """A whole output's answer text and calls."""
    splitter = OutputSplitter(tool_format)
    events = splitter.feed(text) + splitter.finish()
    content = "".join(event.text for event in events if isinstance(event, ContentDelta))
    return content, list(splitter.calls)
