"""The one chat input an engine gets: the wire request checked, media decoded and options decided by the server."""

from __future__ import annotations

from typing import Any

import msgspec

from hypnos.openai import ToolCall, ToolDefinition


class TextPart(msgspec.Struct, tag="text", kw_only=True):
    """Text of a message."""

    text: str


class ImagePart(msgspec.Struct, tag="image", kw_only=True):
    """An image's encoded bytes (PNG, JPEG, WebP ...) as the client sent or the server fetched them."""

    data: bytes
    mime: str | None = None


class AudioPart(msgspec.Struct, tag="audio", kw_only=True):
    """An audio clip's encoded bytes (WAV, MP3 ...) and the format the client declared."""

    data: bytes
    format: str = "wav"


MessagePart = TextPart | ImagePart | AudioPart


class InputMessage(msgspec.Struct, kw_only=True):
    """One message of the conversation: its parts in order, and the tool calls or tool result it carries."""

    role: str
    parts: list[MessagePart] = []
    name: str | None = None
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None

    def text(self) -> str:
        """The text parts joined (media left out)."""
        return "".join(part.text for part in self.parts if isinstance(part, TextPart))

    @property
    def media(self) -> list[ImagePart | AudioPart]:
        """The image and audio parts, in order."""
        return [part for part in self.parts if not isinstance(part, TextPart)]


class Sampling(msgspec.Struct, kw_only=True):
    """Sampling fields as the client sent them (None: the engine's default)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # the repetition penalty over the latest tokens, the prompt's included (1.0: off; None: the model's default)
    repeat_penalty: float | None = None
    logit_bias: dict[int, float] = {}


class ResponseFormat(msgspec.Struct, kw_only=True):
    """`response_format`: text, json_object, or json_schema with its schema and strictness."""

    type: str = "text"
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool = False


class ChatInput(msgspec.Struct, kw_only=True):
    """A chat request as an engine serves it; built once by the server from the wire request."""

    messages: list[InputMessage]
    max_tokens: int
    sampling: Sampling = msgspec.field(default_factory=Sampling)
    tools: list[ToolDefinition] = []
    # "none", "auto" or "required"; a named function forces that function (tool_choice "required" too)
    tool_choice: str = "auto"
    forced_tool: str | None = None
    thinking: bool = False
    # thinking tokens allowed before the block is closed (None: unbounded)
    thinking_budget: int | None = None
    context_len: int | None = None
    response_format: ResponseFormat | None = None
    stop: list[str] = []
    n: int = 1
    logprobs: bool = False
    top_logprobs: int | None = None
    # whose saved prompt states may serve this request (the prompt cache): None anyone's; the server sets the API
    # key's label with server.prompt_cache_isolation = "key"
    cache_scope: str | None = None
    # the lease's priority: below 0 (a batch line) an engine that steps several answers together runs it only in
    # what interactive answers leave (the llama batch loop: its prefill and decode yield to theirs)
    priority: int = 0

    @property
    def wants_tools(self) -> bool:
        """True when tools are declared and tool_choice is not "none"."""
        return bool(self.tools) and self.tool_choice != "none"

    def media(self) -> list[ImagePart | AudioPart]:
        """Every media part of the conversation, in prompt order."""
        return [part for message in self.messages for part in message.media]

    def count(self, kind: type[ImagePart] | type[AudioPart]) -> int:
        """How many media parts of this kind the conversation holds."""
        return sum(1 for part in self.media() if isinstance(part, kind))


def chat_input(*turns: str, max_tokens: int = 16, **fields: Any) -> ChatInput:
    """A text conversation alternating user / assistant (starting with the user): for tests and benches."""
    messages = [
        InputMessage(role="user" if index % 2 == 0 else "assistant", parts=[TextPart(text=turn)])
        for index, turn in enumerate(turns)
    ]
    return ChatInput(messages=messages, max_tokens=max_tokens, **fields)
