"""The wire chat request (section 7.1) checked and turned into the one core ChatInput engines serve."""

from __future__ import annotations

from hypnos.chat import (
    AudioPart,
    ChatInput,
    ImagePart,
    InputMessage,
    MessagePart,
    ResponseFormat,
    Sampling,
    TextPart,
)
from hypnos.config import LimitsConfig
from hypnos.errors import invalid_request
from hypnos.image_header import check_image_pixels
from hypnos.media import decode_base64, load_media_url
from hypnos.openai import ChatCompletionRequest, ChatMessage
from hypnos.types import Modality

from hypnos_server.wav import check_wav

DEFAULT_MAX_TOKENS = 512
ROLES = {"system", "user", "assistant", "tool", "developer"}
THINKING_BUDGETS = {"low": 512, "minimal": 512, "medium": 2048, "high": 6144}
TOOL_CHOICES = {"none", "auto", "required"}
RESPONSE_FORMATS = {"text", "json_object", "json_schema"}
MAX_STOP = 4
MAX_TOP_LOGPROBS = 20
MAX_SCHEMA_DEPTH = 64  # nesting of a tool's parameters schema; far beyond any real one, far below recursion limits


def required_modalities(body: ChatCompletionRequest, limits: LimitsConfig) -> list[Modality]:
    """Validate the messages against section 1's limits (cheap: no media decoded); every modality the model must
    serve: text generation, plus vision for an image part and speech_to_text for an audio part."""
    if not body.messages:
        raise invalid_request("`messages` must be a non-empty array")
    needed = [Modality.TEXT_GENERATION]
    chars = 0
    for index, message in enumerate(body.messages):
        if message.role not in ROLES:
            raise invalid_request(f"Invalid value for `messages[{index}].role`: unknown role `{message.role}`")
        chars += len(message.text())
        for call in message.tool_calls or []:
            chars += len(call.function.arguments)
        if not isinstance(message.content, list):
            continue
        for part in message.content:
            if part.type == "text":
                continue
            if part.type == "image_url" and part.image_url is not None:
                _check_image_url(part.image_url.url, limits, index)
                needed.append(Modality.VISION)
            elif part.type == "input_audio" and part.input_audio is not None:
                if len(part.input_audio.data) * 3 // 4 > limits.max_audio_bytes:
                    raise invalid_request(f"`messages[{index}]` audio is larger than limits.max_audio_bytes")
                needed.append(Modality.SPEECH_TO_TEXT)
            else:
                raise invalid_request(f"Invalid value for `messages[{index}].content`: unknown part `{part.type}`")
    if chars > limits.max_prompt_chars:
        raise invalid_request(f"The messages hold {chars} characters, above limits.max_prompt_chars")
    return list(dict.fromkeys(needed))


def _check_image_url(url: str, limits: LimitsConfig, index: int) -> None:
    if url.startswith("data:"):
        _, _, payload = url.partition(",")
        if len(payload) * 3 // 4 > limits.max_image_bytes:
            raise invalid_request(f"`messages[{index}]` image is larger than limits.max_image_bytes")
    elif url.startswith(("http://", "https://")):
        if not limits.allow_remote_image_urls:
            raise invalid_request("Remote image URLs are not allowed here (limits.allow_remote_image_urls)")
    else:
        raise invalid_request(f"Invalid value for `messages[{index}]` image_url: expected a data: or http(s) URL")


async def build_chat_input(body: ChatCompletionRequest, limits: LimitsConfig) -> ChatInput:
    """The ChatInput of a request already passed through required_modalities: media fetched and decoded to bytes,
    max_tokens clamped, thinking decided, tools, sampling and output controls checked."""
    requested = body.max_tokens if body.max_tokens is not None else body.max_completion_tokens
    max_tokens = DEFAULT_MAX_TOKENS if requested is None else requested
    if max_tokens < 1:
        raise invalid_request("Invalid value for `max_tokens`: expected an integer >= 1")
    if body.num_ctx is not None and body.num_ctx < 1:
        raise invalid_request("Invalid value for `num_ctx`: expected an integer >= 1")
    _check_tool_schemas(body)
    tool_choice, forced = _tool_choice(body)
    thinking, budget = _thinking(body)
    return ChatInput(
        messages=[await _message(message, limits, index) for index, message in enumerate(body.messages)],
        max_tokens=min(max_tokens, limits.max_tokens_cap),
        sampling=_sampling(body),
        tools=list(body.tools or []),
        tool_choice=tool_choice,
        forced_tool=forced,
        thinking=thinking,
        thinking_budget=budget,
        context_len=body.num_ctx,
        response_format=_response_format(body),
        stop=_stop(body),
        n=_n(body),
        logprobs=bool(body.logprobs),
        top_logprobs=_top_logprobs(body),
    )


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


def _check_tool_schemas(body: ChatCompletionRequest) -> None:
    for index, tool in enumerate(body.tools or []):
        if nesting_depth(tool.function.parameters) > MAX_SCHEMA_DEPTH:
            raise invalid_request(
                f"Invalid value for `tools[{index}].function.parameters`: nested deeper than {MAX_SCHEMA_DEPTH}"
            )


async def _message(message: ChatMessage, limits: LimitsConfig, index: int) -> InputMessage:
    parts: list[MessagePart] = []
    if isinstance(message.content, str):
        parts.append(TextPart(text=message.content))
    elif message.content is not None:
        for part in message.content:
            if part.type == "text":
                parts.append(TextPart(text=part.text or ""))
            elif part.type == "image_url" and part.image_url is not None:
                media = await load_media_url(
                    part.image_url.url,
                    max_bytes=limits.max_image_bytes,
                    allow_remote=limits.allow_remote_image_urls,
                    allow_private=limits.allow_private_urls,
                    what="image",
                )
                check_image_pixels(media.data, limits.max_image_pixels, f"`messages[{index}]` image")
                parts.append(ImagePart(data=media.data, mime=media.mime))
            elif part.type == "input_audio" and part.input_audio is not None:
                data = decode_base64(part.input_audio.data, max_bytes=limits.max_audio_bytes, what="audio")
                check_wav(data)  # a WAV's header is checked before any decoder sees it
                parts.append(AudioPart(data=data, format=part.input_audio.format))
    return InputMessage(
        role=message.role,
        parts=parts,
        name=message.name,
        tool_calls=list(message.tool_calls or []),
        tool_call_id=message.tool_call_id,
    )


def _tool_choice(body: ChatCompletionRequest) -> tuple[str, str | None]:
    choice = body.tool_choice
    if choice is None:
        return "auto", None
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise invalid_request(f"Invalid value for `tool_choice`: `{choice}`")
        return choice, None
    names = {tool.function.name for tool in body.tools or []}
    if choice.function.name not in names:
        raise invalid_request(f"`tool_choice` names `{choice.function.name}`, which is not in `tools`")
    return "required", choice.function.name


def _thinking(body: ChatCompletionRequest) -> tuple[bool, int | None]:
    effort = body.reasoning_effort
    if effort is None:
        return bool(body.think), None
    if effort == "none":
        return False, None
    if effort not in THINKING_BUDGETS:
        raise invalid_request(f"Invalid value for `reasoning_effort`: `{effort}`")
    return True, THINKING_BUDGETS[effort]


def _sampling(body: ChatCompletionRequest) -> Sampling:
    bias: dict[int, float] = {}
    for token, value in (body.logit_bias or {}).items():
        if not token.lstrip("-").isdigit() or not -100.0 <= value <= 100.0:
            raise invalid_request("Invalid value for `logit_bias`: token ids to numbers between -100 and 100")
        bias[int(token)] = value
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(body, name)
        if value is not None and not -2.0 <= value <= 2.0:
            raise invalid_request(f"Invalid value for `{name}`: expected a number between -2 and 2")
    return Sampling(
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        logit_bias=bias,
    )


def _response_format(body: ChatCompletionRequest) -> ResponseFormat | None:
    wire = body.response_format
    if wire is None:
        return None
    if wire.type not in RESPONSE_FORMATS:
        raise invalid_request(f"Invalid value for `response_format.type`: `{wire.type}`")
    if wire.type != "json_schema":
        return ResponseFormat(type=wire.type)
    schema = wire.json_schema
    if schema is None or schema.schema is None:
        raise invalid_request("`response_format.json_schema.schema` is required for type `json_schema`")
    return ResponseFormat(type=wire.type, name=schema.name, schema=schema.schema, strict=bool(schema.strict))


def _stop(body: ChatCompletionRequest) -> list[str]:
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if len(stop) > MAX_STOP or any(not text for text in stop):
        raise invalid_request(f"Invalid value for `stop`: up to {MAX_STOP} non-empty strings")
    return stop


def _n(body: ChatCompletionRequest) -> int:
    if body.n is not None and body.n < 1:
        raise invalid_request("Invalid value for `n`: expected an integer >= 1")
    return body.n or 1


def _top_logprobs(body: ChatCompletionRequest) -> int | None:
    value = body.top_logprobs
    if value is not None and not 0 <= value <= MAX_TOP_LOGPROBS:
        raise invalid_request(f"Invalid value for `top_logprobs`: expected 0..{MAX_TOP_LOGPROBS}")
    return value
