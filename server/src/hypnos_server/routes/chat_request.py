"""The one internal chat request every chat-shaped wire format (chat completions, Responses, Anthropic Messages,
realtime) maps to directly: the core ChatInput the engine takes, the model, the stream flag and the modalities the
model must serve; and the checks of section 1's limits and chat's options those mappings share."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypnos.chat import (
    AudioPart,
    ChatInput,
    ImagePart,
    InputMessage,
    ResponseFormat,
    Sampling,
    TextPart,
)
from hypnos.config import LimitsConfig
from hypnos.errors import invalid_request
from hypnos.image_header import check_image_pixels
from hypnos.kit.audio import check_wav
from hypnos.media import decode_base64, load_media_url
from hypnos.openai import ToolCall, ToolDefinition
from hypnos.types import Modality

DEFAULT_MAX_TOKENS = 512
ROLES = {"system", "user", "assistant", "tool", "developer"}
TOOL_CHOICES = {"none", "auto", "required"}
RESPONSE_FORMATS = {"text", "json_object", "json_schema"}
MAX_STOP = 4
MAX_TOP_LOGPROBS = 20
MAX_SCHEMA_DEPTH = 64  # nesting of a tool's parameters schema; far beyond any real one, far below recursion limits


@dataclass
class _PendingMedia:
    """A media part whose bytes are loaded once the model is known to serve the request."""

    part: ImagePart | AudioPart
    source: str  # an image's URL, an audio clip's base64
    where: str


@dataclass
class ChatRequest:
    """A chat request as the server runs it, whatever wire format it came in: what the engine takes, the model,
    whether it streams and every modality the model must serve. Media parts hold their bytes after `load()`."""

    model: str
    chat: ChatInput
    modalities: list[Modality]
    stream: bool = False
    _pending: list[_PendingMedia] = field(default_factory=list)

    async def load(self, limits: LimitsConfig) -> None:
        """Fetch and decode the media parts (remote images fetched, data checked); each part loaded once."""
        pending, self._pending = self._pending, []
        for media in pending:
            if isinstance(media.part, ImagePart):
                loaded = await load_media_url(
                    media.source,
                    max_bytes=limits.max_image_bytes,
                    allow_remote=limits.allow_remote_image_urls,
                    allow_private=limits.allow_private_urls,
                    what="image",
                )
                check_image_pixels(loaded.data, limits.max_image_pixels, f"`{media.where}` image")
                media.part.data, media.part.mime = loaded.data, loaded.mime
            else:
                data = decode_base64(media.source, max_bytes=limits.max_audio_bytes, what="audio")
                check_wav(data)  # a WAV's header is checked before any decoder sees it
                media.part.data = data


class Conversation:
    """The messages of a chat request, built by a wire format's mapping and checked against section 1's limits as
    they are added (cheap: media bytes are loaded later, by ChatRequest.load)."""

    def __init__(self, limits: LimitsConfig) -> None:
        self.limits = limits
        self.messages: list[InputMessage] = []
        self.modalities = [Modality.TEXT_GENERATION]
        self.chars = 0
        self.pending: list[_PendingMedia] = []

    @property
    def where(self) -> str:
        """How errors name the last message: its place in the chat conversation."""
        return f"messages[{len(self.messages) - 1}]"

    def add(
        self,
        role: str,
        text: str | None = None,
        *,
        name: str | None = None,
        tool_calls: list[ToolCall] | None = None,
        tool_call_id: str | None = None,
    ) -> InputMessage:
        """A new message (its text, if given, as its first part)."""
        if role not in ROLES:
            raise invalid_request(f"Invalid value for `messages[{len(self.messages)}].role`: unknown role `{role}`")
        message = InputMessage(role=role, name=name, tool_calls=list(tool_calls or []), tool_call_id=tool_call_id)
        self.messages.append(message)
        self.chars += sum(len(call.function.arguments) for call in message.tool_calls)
        if text is not None:
            self.text(message, text)
        return message

    def text(self, message: InputMessage, text: str) -> None:
        """A text part."""
        message.parts.append(TextPart(text=text))
        self.chars += len(text)

    def image(self, message: InputMessage, url: str) -> None:
        """An image part by data: or http(s) URL (checked now, loaded by ChatRequest.load)."""
        where, limits = self.where, self.limits
        if url.startswith("data:"):
            _, _, payload = url.partition(",")
            if len(payload) * 3 // 4 > limits.max_image_bytes:
                raise invalid_request(f"`{where}` image is larger than limits.max_image_bytes")
        elif url.startswith(("http://", "https://")):
            if not limits.allow_remote_image_urls:
                raise invalid_request("Remote image URLs are not allowed here (limits.allow_remote_image_urls)")
        else:
            raise invalid_request(f"Invalid value for `{where}` image_url: expected a data: or http(s) URL")
        part = ImagePart(data=b"")
        message.parts.append(part)
        self.pending.append(_PendingMedia(part, url, where))
        self.modalities.append(Modality.VISION)

    def audio(self, message: InputMessage, data: str, format: str) -> None:
        """An audio part of base64 data (its size checked now, decoded by ChatRequest.load)."""
        if len(data) * 3 // 4 > self.limits.max_audio_bytes:
            raise invalid_request(f"`{self.where}` audio is larger than limits.max_audio_bytes")
        part = AudioPart(data=b"", format=format)
        message.parts.append(part)
        self.pending.append(_PendingMedia(part, data, self.where))
        self.modalities.append(Modality.SPEECH_TO_TEXT)

    def request(self, model: str, chat: ChatInput, stream: bool = False) -> ChatRequest:
        """The ChatRequest of these messages and `chat`'s options."""
        return ChatRequest(
            model=model,
            chat=chat,
            modalities=list(dict.fromkeys(self.modalities)),
            stream=stream,
            _pending=self.pending,
        )

    def checked(self) -> list[InputMessage]:
        """The messages, once checked as a whole: at least one, within limits.max_prompt_chars."""
        if not self.messages:
            raise invalid_request("`messages` must be a non-empty array")
        if self.chars > self.limits.max_prompt_chars:
            raise invalid_request(f"The messages hold {self.chars} characters, above limits.max_prompt_chars")
        return self.messages


def max_tokens_of(
    requested: int | None, limits: LimitsConfig, name: str = "max_tokens", default: int = DEFAULT_MAX_TOKENS
) -> int:
    """The output bound: `default` when unset, clamped to limits.max_tokens_cap; 400 below 1."""
    max_tokens = default if requested is None else requested
    if max_tokens < 1:
        raise invalid_request(f"Invalid value for `{name}`: expected an integer >= 1")
    return min(max_tokens, limits.max_tokens_cap)


def context_len_of(num_ctx: int | None) -> int | None:
    """`num_ctx`, checked."""
    if num_ctx is not None and num_ctx < 1:
        raise invalid_request("Invalid value for `num_ctx`: expected an integer >= 1")
    return num_ctx


def nesting_depth(value: object) -> int:
    """How deeply dicts and lists nest in a decoded JSON value (iterative: no recursion to exhaust)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in children)
    return deepest


def checked_tools(tools: list[ToolDefinition] | None) -> list[ToolDefinition]:
    """The tools, their parameter schemas nested no deeper than MAX_SCHEMA_DEPTH."""
    for index, tool in enumerate(tools or []):
        if nesting_depth(tool.function.parameters) > MAX_SCHEMA_DEPTH:
            raise invalid_request(
                f"Invalid value for `tools[{index}].function.parameters`: nested deeper than {MAX_SCHEMA_DEPTH}"
            )
    return list(tools or [])


def tool_choice_of(
    choice: str | None, tools: list[ToolDefinition], forced: str | None = None
) -> tuple[str, str | None]:
    """(tool_choice, forced tool): a named function forces it (400 when it is not declared)."""
    if forced is not None:
        if forced not in {tool.function.name for tool in tools}:
            raise invalid_request(f"`tool_choice` names `{forced}`, which is not in `tools`")
        return "required", forced
    if choice is None:
        return "auto", None
    if choice not in TOOL_CHOICES:
        raise invalid_request(f"Invalid value for `tool_choice`: `{choice}`")
    return choice, None


def sampling_of(
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    logit_bias: dict[str, float] | None = None,
    repeat_penalty: tuple[str, float | None] = ("repetition_penalty", None),
) -> Sampling:
    """The sampling fields, checked: penalties in -2..2, logit_bias token ids to -100..100, the repetition penalty
    (`repeat_penalty`: the field's name and value) above 0."""
    bias: dict[int, float] = {}
    for token, value in (logit_bias or {}).items():
        if not token.lstrip("-").isdigit() or not -100.0 <= value <= 100.0:
            raise invalid_request("Invalid value for `logit_bias`: token ids to numbers between -100 and 100")
        bias[int(token)] = value
    for name, penalty in (("presence_penalty", presence_penalty), ("frequency_penalty", frequency_penalty)):
        if penalty is not None and not -2.0 <= penalty <= 2.0:
            raise invalid_request(f"Invalid value for `{name}`: expected a number between -2 and 2")
    repeat_name, repeat = repeat_penalty
    if repeat is not None and not 0.0 < repeat < float("inf"):
        raise invalid_request(f"Invalid value for `{repeat_name}`: expected a number above 0 (1 is no penalty)")
    return Sampling(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        presence_penalty=presence_penalty or 0.0,
        frequency_penalty=frequency_penalty or 0.0,
        repeat_penalty=repeat,
        logit_bias=bias,
    )


def response_format_of(
    kind: str, name: str | None, schema: object, strict: bool | None, field: str = "response_format"
) -> ResponseFormat:
    """A response format: text, json_object, or json_schema with its schema (400 without one)."""
    if kind not in RESPONSE_FORMATS:
        raise invalid_request(f"Invalid value for `{field}.type`: `{kind}`")
    if kind != "json_schema":
        return ResponseFormat(type=kind)
    if not isinstance(schema, dict):
        raise invalid_request(f"`{field}.json_schema.schema` is required for type `json_schema`")
    return ResponseFormat(type=kind, name=name, schema=schema, strict=bool(strict))


def stop_of(stop: str | list[str] | None, name: str = "stop") -> list[str]:
    """The stop sequences: up to MAX_STOP non-empty strings."""
    found = [stop] if isinstance(stop, str) else list(stop or [])
    if len(found) > MAX_STOP or any(not text for text in found):
        raise invalid_request(f"Invalid value for `{name}`: up to {MAX_STOP} non-empty strings")
    return found


def n_of(n: int | None) -> int:
    """How many choices: >= 1."""
    if n is not None and n < 1:
        raise invalid_request("Invalid value for `n`: expected an integer >= 1")
    return n or 1


def top_logprobs_of(value: int | None) -> int | None:
    """`top_logprobs` in 0..MAX_TOP_LOGPROBS."""
    if value is not None and not 0 <= value <= MAX_TOP_LOGPROBS:
        raise invalid_request(f"Invalid value for `top_logprobs`: expected 0..{MAX_TOP_LOGPROBS}")
    return value
