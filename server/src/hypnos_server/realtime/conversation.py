"""The session's conversation: items as the Realtime protocol shows them, and the chat messages they make."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypnos.errors import invalid_request
from hypnos.openai import FunctionDefinition, ToolCall, ToolCallFunction, ToolDefinition

from hypnos_server.realtime.events import RealtimeError, new_id
from hypnos_server.realtime.session import SessionConfig
from hypnos_server.routes.chat_request import Conversation

MAX_ITEMS = 512  # the oldest items are dropped past this (a bounded conversation)
TEXT_PARTS = {"input_text", "text", "output_text"}


@dataclass
class Item:
    """One conversation item: a message (user audio or text, system, assistant), a function call or its output."""

    type: str
    role: str | None = None
    id: str = field(default_factory=lambda: new_id("item"))
    text: str = ""
    audio: bool = False  # a user audio message or a spoken assistant message
    status: str = "completed"
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""
    output: str = ""
    spoken: list[tuple[str, float]] = field(default_factory=list)  # assistant phrases with the ms their audio ends
    committed_at: float | None = None  # user audio: when it was committed (perf_counter), the end of the speech
    transcription_ms: float | None = None  # user audio: how long its transcription took
    transcript_wait_ms: float | None = (
        None  # user audio: from its commit to its transcript (the part on the turn's way)
    )

    def render(self, ga: bool = False) -> dict[str, Any]:
        """The item in the protocol's shape."""
        head = {"id": self.id, "object": "realtime.item", "type": self.type, "status": self.status}
        if self.type == "function_call":
            return {**head, "call_id": self.call_id, "name": self.name, "arguments": self.arguments}
        if self.type == "function_call_output":
            return {**head, "call_id": self.call_id, "output": self.output}
        return {**head, "role": self.role, "content": [self.part(ga)]}

    def part(self, ga: bool = False) -> dict[str, Any]:
        """The item's one content part."""
        if self.role == "assistant":
            if self.audio:
                return {"type": "output_audio" if ga else "audio", "transcript": self.text}
            return {"type": "output_text" if ga else "text", "text": self.text}
        if self.audio:
            return {"type": "input_audio", "transcript": self.text or None}
        return {"type": "input_text", "text": self.text}

    def truncate(self, audio_end_ms: float) -> None:
        """Keep the text of what was heard up to audio_end_ms (the words of a phrase cut off in its share)."""
        kept, start = [], 0.0
        for phrase, end in self.spoken:
            if end <= audio_end_ms:
                kept.append(phrase)
            elif start < audio_end_ms:
                words = phrase.split()
                share = int(len(words) * (audio_end_ms - start) / max(end - start, 1.0))
                kept.append(" ".join(words[:share]))
            start = end
        self.text = " ".join(piece for piece in kept if piece)
        self.spoken = [(phrase, end) for phrase, end in self.spoken if end <= audio_end_ms]
        self.status = "incomplete"


def output_limit(options: dict[str, Any], default: int | None) -> int | None:
    """A response.create's `max_output_tokens` (or the beta `max_response_output_tokens`): an integer >= 1, "inf"
    (None), or absent (the session's)."""
    limit = options.get("max_output_tokens", options.get("max_response_output_tokens"))
    if limit is None:
        return default
    if limit == "inf":
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        message = 'Invalid value for `response.max_output_tokens`: an integer >= 1 or "inf"'
        raise RealtimeError(message, param="response.max_output_tokens")
    return limit


def item_chars(item: Item) -> int:
    """The characters an item holds (what it adds to the prompt, and to the session's memory)."""
    return len(item.text) + len(item.arguments) + len(item.output) + len(item.name or "")


def parse_item(raw: Any) -> Item:
    """The item of a conversation.item.create: a text message or a function call's output (or call)."""
    if not isinstance(raw, dict):
        raise RealtimeError("`item` must be an object", param="item")
    kind = raw.get("type")
    given_id = raw.get("id")
    item_id = given_id if isinstance(given_id, str) and given_id else new_id("item")
    if kind == "function_call_output":
        if not isinstance(raw.get("call_id"), str) or not isinstance(raw.get("output"), str):
            raise RealtimeError("A function_call_output needs string `call_id` and `output`", param="item")
        return Item(type=kind, id=item_id, call_id=raw["call_id"], output=raw["output"])
    if kind == "function_call":
        if not isinstance(raw.get("name"), str) or not isinstance(raw.get("call_id"), str):
            raise RealtimeError("A function_call needs string `call_id` and `name`", param="item")
        arguments = raw.get("arguments")
        arguments = arguments if isinstance(arguments, str) else "{}"
        return Item(type=kind, id=item_id, call_id=raw["call_id"], name=raw["name"], arguments=arguments)
    if kind not in (None, "message"):
        raise RealtimeError(f"Unsupported item type `{kind}`", param="item.type")
    role = raw.get("role")
    if not isinstance(role, str) or role not in {"user", "system", "assistant", "developer"}:
        raise RealtimeError(f"Invalid value for `item.role`: `{str(role)[:64]}`", param="item.role")
    content = raw.get("content")
    if not isinstance(content, list) or not content:
        raise RealtimeError("`item.content` must be a non-empty array", param="item.content")
    texts = []
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str) or not isinstance(part.get("text"), str):
            raise RealtimeError("Message parts must be text parts ({type: input_text, text})", param="item.content")
        if part["type"] not in TEXT_PARTS:
            raise RealtimeError("Message parts must be text parts ({type: input_text, text})", param="item.content")
        texts.append(part["text"])
    return Item(type="message", id=item_id, role=role, text="".join(texts))


def add_items(conversation: Conversation, config: SessionConfig, items: list[Item], instructions: str | None) -> None:
    """The conversation's chat messages, the instructions first."""
    system = instructions if instructions is not None else config.instructions
    if system:
        conversation.add("system", system)
    for item in items:
        last = conversation.messages[-1] if conversation.messages else None
        if item.type == "function_call":
            arguments = item.arguments
            call = ToolCall(id=item.call_id or "", function=ToolCallFunction(name=item.name or "", arguments=arguments))
            if last is not None and last.role == "assistant" and last.tool_calls:
                last.tool_calls.append(call)
                conversation.chars += len(arguments)
            else:
                conversation.add("assistant", tool_calls=[call])
        elif item.type == "function_call_output":
            conversation.add("tool", item.output, tool_call_id=item.call_id)
        elif item.text:
            conversation.add("system" if item.role == "developer" else item.role or "user", item.text)


def chat_tools(config: SessionConfig) -> tuple[list[ToolDefinition], str | None, str | None]:
    """The session's tools as chat's, its tool_choice and the function it forces (if any)."""
    if not config.tools:
        return [], None, None
    tools = [
        ToolDefinition(
            function=FunctionDefinition(
                name=tool.name,
                description=tool.description,
                parameters=tool.parameters or {"type": "object", "properties": {}},
            )
        )
        for tool in config.tools
    ]
    choice = config.tool_choice
    if isinstance(choice, dict):
        if not isinstance(choice.get("name"), str):
            raise invalid_request("Invalid value for `tool_choice`: a function by `name`")
        return tools, None, choice["name"]
    return tools, choice if isinstance(choice, str) else None, None
