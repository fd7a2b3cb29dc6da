"""OpenAI-compatible request Structs shared by the server's routes and the engines (unknown fields are ignored)."""

from __future__ import annotations

from typing import Any

import msgspec


class FunctionDefinition(msgspec.Struct, kw_only=True):
    """A function the model may call."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDefinition(msgspec.Struct, kw_only=True):
    """One entry of `tools`."""

    function: FunctionDefinition
    type: str = "function"


class ToolChoiceFunction(msgspec.Struct, kw_only=True):
    """The `function` of a named tool_choice."""

    name: str


class ToolChoiceObject(msgspec.Struct, kw_only=True):
    """tool_choice = {"type": "function", "function": {"name": ...}}."""

    function: ToolChoiceFunction
    type: str = "function"


class ToolCallFunction(msgspec.Struct, kw_only=True):
    """The function half of a tool call: name and JSON arguments as a string."""

    name: str
    arguments: str = "{}"


class ToolCall(msgspec.Struct, kw_only=True):
    """A call the model asked for (also sent back by the client in history)."""

    id: str
    function: ToolCallFunction
    type: str = "function"


class ImageUrl(msgspec.Struct, kw_only=True):
    """An image_url part's payload: a data: URL or an http(s) URL."""

    url: str
    detail: str | None = None


class InputAudio(msgspec.Struct, kw_only=True):
    """An input_audio part's payload: base64 audio and its format."""

    data: str
    format: str = "wav"


class ContentPart(msgspec.Struct, kw_only=True):
    """One part of a message's content array: text, image_url or input_audio."""

    type: str
    text: str | None = None
    image_url: ImageUrl | None = None
    input_audio: InputAudio | None = None


class ChatMessage(msgspec.Struct, kw_only=True):
    """One message of the conversation."""

    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text parts joined (media parts left out)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content if part.type == "text")


class JsonSchemaFormat(msgspec.Struct, kw_only=True):
    """response_format.json_schema: the schema the answer must follow."""

    name: str | None = None
    description: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseFormatParam(msgspec.Struct, kw_only=True):
    """`response_format`: {"type": "text" | "json_object" | "json_schema", "json_schema": {...}}."""

    type: str = "text"
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(msgspec.Struct, kw_only=True):
    """`stream_options`: include_usage asks for OpenAI's usage chunk (choices []) before [DONE]."""

    include_usage: bool | None = None


class ChatCompletionRequest(msgspec.Struct, kw_only=True):
    """POST /v1/chat/completions body (section 7.1)."""

    model: str
    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    num_ctx: int | None = None
    think: bool | None = None
    reasoning_effort: str | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: str | ToolChoiceObject | None = None
    response_format: ResponseFormatParam | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # extensions: the repetition penalty by vLLM's name and by llama.cpp's (one is enough)
    repetition_penalty: float | None = None
    repeat_penalty: float | None = None
    logit_bias: dict[str, float] | None = None


class EmbeddingsRequest(msgspec.Struct, kw_only=True):
    """POST /v1/embeddings body (section 8)."""

    model: str
    # a string, an array of strings, an array of token ids, or an array of token-id arrays
    input: str | list[str | int | list[int]]
    encoding_format: str | None = None
    dimensions: int | None = None


class SpeechRequest(msgspec.Struct, kw_only=True):
    """POST /v1/audio/speech body (section 10)."""

    model: str
    input: str
    voice: str = "alloy"
    response_format: str = "wav"
    speed: float = 1.0
    stream: bool = False
    language: str = "en"


class TranscriptionJsonRequest(msgspec.Struct, kw_only=True):
    """The JSON form of POST /v1/audio/transcriptions: audio as an array of byte values."""

    model: str
    audio_bytes: list[int]
    filename: str | None = None
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"


class ImageGenerationRequest(msgspec.Struct, kw_only=True):
    """POST /v1/images/generations body (section 11)."""

    model: str
    prompt: str
    negative_prompt: str | None = None
    n: int = 1
    size: str = "1024x1024"
    response_format: str = "b64_json"
    steps: int | None = None
    seed: int | None = None
    cfg_scale: float | None = None
