"""The session's conversation: items as the Realtime protocol shows them, and the chat messages they make."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypnos_server.realtime.events import RealtimeError, new_id
from hypnos_server.realtime.session import SessionConfig

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


def parse_item(raw: Any) -> Item:
    """The item of a conversation.item.create: a text message or a function call's output (or call)."""
    if not isinstance(raw, dict):
        raise RealtimeError("`item` must be an object", param="item")
    kind = raw.get("type")
    item_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else new_id("item")
    if kind == "function_call_output":
        if not isinstance(raw.get("call_id"), str) or not isinstance(raw.get("output"), str):
            raise RealtimeError("A function_call_output needs string `call_id` and `output`", param="item")
        return Item(type=kind, id=item_id, call_id=raw["call_id"], output=raw["output"])
    if kind == "function_call":
        if not isinstance(raw.get("name"), str) or not isinstance(raw.get("call_id"), str):
            raise RealtimeError("A function_call needs string `call_id` and `name`", param="item")
        arguments = raw.get("arguments") if isinstance(raw.get("arguments"), str) else "{}"
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


def chat_messages(config: SessionConfig, items: list[Item], instructions: str | None) -> list[dict[str, Any]]:
    """The chat messages of the conversation, the instructions first."""
    system = instructions if instructions is not None else config.instructions
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for item in items:
        if item.type == "function_call":
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif item.type == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
        elif item.text:
            messages.append({"role": "system" if item.role == "developer" else item.role, "content": item.text})
    return messages


def chat_tools(config: SessionConfig) -> tuple[list[dict[str, Any]] | None, Any]:
    """The session's tools and tool_choice in the chat request's shape."""
    if not config.tools:
        return None, None
    tools = [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters or {"type": "object", "properties": {}},
            },
        }
        for tool in config.tools
    ]
    choice = config.tool_choice
    if isinstance(choice, dict) and isinstance(choice.get("name"), str):
        choice = {"type": "function", "function": {"name": choice["name"]}}
    return tools, choice if isinstance(choice, (str, dict)) else None
