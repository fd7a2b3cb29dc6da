"""The Responses event stream: chat engine events as `response.*` SSE events, with items opened and closed in order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from hypnos.engine import ChatEvent, ContentDelta, ReasoningDelta, ToolCallEvent

from hypnos_server.routes.responses_input import item_id
from hypnos_server.routes.responses_output import call_item, message_item, reasoning_item
from hypnos_server.routes.responses_tools import ToolSet


def sse_frame(kind: str, payload: bytes) -> bytes:
    """One `event:` / `data:` server-sent event."""
    return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"


DONE = b"data: [DONE]\n\n"  # the spec's terminal event of an SSE stream


async def ending_with_done(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """An SSE stream's events, then the literal `[DONE]` the spec ends every stream with."""
    async for chunk in chunks:
        yield chunk
    yield DONE


def line_frame(_kind: str, payload: bytes) -> bytes:
    """The event's JSON on a line of its own (one WebSocket message each)."""
    return payload + b"\n"


class ResponseEvents:
    """Builds one stream's events (SSE by default, or `frame`d otherwise); `output` holds every item closed so far,
    in output order; calls are named as the client declared their tools."""

    def __init__(self, summary: bool, tools: ToolSet | None = None, frame: Any = sse_frame) -> None:
        self.summary = summary
        self.tools = tools or ToolSet()
        self.frame = frame
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the item being written: its kind, place and text so far
        self.text: list[str] = []

    def event(self, kind: str, **fields: Any) -> bytes:
        """One event with the next sequence number, framed."""
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return self.frame(kind, msgspec.json.encode(payload))

    def add(self, event: ChatEvent) -> list[bytes]:
        """The events of one engine event (opening and closing items as the kind of output changes)."""
        if isinstance(event, ReasoningDelta) and event.index == 0 and event.text:
            # the thoughts are the summary when one is asked for, streamed as one (Codex CLI shows these)
            kind = "response.reasoning_summary_text.delta" if self.summary else "response.reasoning_text.delta"
            return [*self._ensure("reasoning"), self._delta(kind, event.text)]
        if isinstance(event, ContentDelta) and event.index == 0 and event.text:
            logprobs = event.logprobs or []
            opened = self._ensure("message")
            assert self._open is not None
            self._open["logprobs"].extend(logprobs)
            return [*opened, self._delta("response.output_text.delta", event.text, logprobs=logprobs)]
        if isinstance(event, ToolCallEvent) and event.index == 0:
            if not self.tools.keeps(sum(item["type"] == "function_call" for item in self.output)):
                return []  # past max_tool_calls
            out = self.close()
            index, item = len(self.output), self.tools.name_call(call_item(item_id("fc"), event.call))
            arguments = item["arguments"]
            out.append(
                self.event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "arguments": "", "status": "in_progress"},
                )
            )
            common = {"item_id": item["id"], "output_index": index}
            out.append(self.event("response.function_call_arguments.delta", **common, delta=arguments))
            out.append(
                self.event("response.function_call_arguments.done", **common, arguments=arguments, name=item["name"])
            )
            out.append(self.event("response.output_item.done", output_index=index, item=item))
            self.output.append(item)
            return out
        return []

    def _ensure(self, kind: str) -> list[bytes]:
        if self._open is not None and self._open["kind"] == kind:
            return []
        out = self.close()
        index = len(self.output)
        ident = item_id("rs" if kind == "reasoning" else "msg")
        # where the item's text goes: its summary's first part when the thoughts are the summary, else its content's
        part_index = "summary_index" if kind == "reasoning" and self.summary else "content_index"
        place = {"item_id": ident, "output_index": index, part_index: 0}
        if kind == "reasoning":
            item = {"type": "reasoning", "id": ident, "summary": [], "content": []}
            out.append(self.event("response.output_item.added", output_index=index, item=item))
            if self.summary:
                part: dict[str, Any] = {"type": "summary_text", "text": ""}
                out.append(self.event("response.reasoning_summary_part.added", **place, part=part))
        else:
            item = {"type": "message", "id": ident, "status": "in_progress", "role": "assistant", "content": []}
            out.append(self.event("response.output_item.added", output_index=index, item=item))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(self.event("response.content_part.added", **place, part=part))
        self._open = {"kind": kind, "place": place, "text": [], "logprobs": []}
        return out

    def _delta(self, kind: str, text: str, **extra: Any) -> bytes:
        current = self._open
        assert current is not None
        current["text"].append(text)
        return self.event(kind, **current["place"], delta=text, **extra)

    def close(self, status: str = "completed") -> list[bytes]:
        """Close the item being written (the message with `status`); nothing when none is open."""
        current, self._open = self._open, None
        if current is None:
            return []
        text, where = "".join(current["text"]), current["place"]
        index, ident = where["output_index"], where["item_id"]
        if current["kind"] == "reasoning":
            item = reasoning_item(ident, text, self.summary)
            if self.summary:
                out = [
                    self.event("response.reasoning_summary_text.done", **where, text=text),
                    self.event("response.reasoning_summary_part.done", **where, part=item["summary"][0]),
                ]
            else:
                out = [self.event("response.reasoning_text.done", **where, text=text)]
        else:
            item = message_item(ident, text, status, current["logprobs"])
            out = [
                self.event("response.output_text.done", **where, text=text, logprobs=current["logprobs"]),
                self.event("response.content_part.done", **where, part=item["content"][0]),
            ]
        out.append(self.event("response.output_item.done", output_index=index, item=item))
        self.output.append(item)
        return out

    def finish(self, status: str) -> list[bytes]:
        """Close the open item; an answer without any output gets its (empty) message item."""
        out = self.close("incomplete" if status == "incomplete" else "completed")
        if not any(item["type"] in ("message", "function_call") for item in self.output):
            out.extend(self._ensure("message"))
            out.extend(self.close("incomplete" if status == "incomplete" else "completed"))
        return out
