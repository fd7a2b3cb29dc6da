"""The model's chat template (from GGUF metadata) rendered in a sandboxed jinja2 environment."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hypnos.chat import ChatInput, InputMessage, TextPart
from hypnos.errors import HypnosError

logger = logging.getLogger(__name__)

CHATML_FALLBACK = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Where a media part sits in the text; the multimodal path (mtmd) replaces it with the media's embeddings.
MEDIA_MARKER = "<__media__>"


class TemplateError(HypnosError):
    """The chat template refused the conversation (raise_exception) or failed to render (400)."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "invalid_request_error", f"the chat template failed: {message}")


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False, **_: Any
) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _arguments(raw: str) -> Any:
    """Tool call arguments as an object when they are JSON (templates expect a mapping)."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def message_to_dict(message: InputMessage) -> dict[str, Any]:
    """One message in the shape HF chat templates expect (content as text, media parts as markers)."""
    content = "".join(part.text if isinstance(part, TextPart) else MEDIA_MARKER for part in message.parts)
    out: dict[str, Any] = {"role": message.role, "content": content}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": call.type,
                "function": {"name": call.function.name, "arguments": _arguments(call.function.arguments)},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


@dataclass
class ChatTemplate:
    """A compiled chat template with the model's bos/eos texts."""

    source: str
    bos_token: str = ""
    eos_token: str = ""

    def __post_init__(self) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        environment.filters["tojson"] = _tojson
        environment.globals["raise_exception"] = _raise_exception
        environment.globals["strftime_now"] = _strftime_now
        self._compiled = environment.from_string(self.source)

    def render(self, request: ChatInput, *, extra: dict[str, Any] | None = None) -> str:
        """The prompt text for a request, ending with the assistant's generation prompt. System (and developer)
        messages before the model's first turn are the system prompt: joined, in order, into the first message,
        where the template lists the tools after them (Claude Code's environment block after its task, Codex's
        second developer message). A later one stands where it is when the template renders it there, except after
        the last user turn: there it goes before that turn, which the model answers (a small model otherwise
        repeats the system text). A template that refuses it or leaves it out gets every system message folded, in
        order, into one system prompt first."""
        messages = trailing_system_first(opening_system_joined([message_to_dict(m) for m in request.messages]))
        if "developer" not in self.source:  # a template that knows no developer role would drop those messages
            for message in messages:
                if message["role"] == "developer":
                    message["role"] = "system"
        inner = [m["content"] for m in messages[1:] if m["role"] == "system" and m["content"]]
        try:
            rendered = self._render(messages, request, extra)
        except TemplateError:
            if not inner:
                raise
            return self._render(folded_system(messages), request, extra)
        if any(content.strip() not in rendered for content in inner):
            return self._render(folded_system(messages), request, extra)
        return rendered

    def _render(self, messages: list[dict[str, Any]], request: ChatInput, extra: dict[str, Any] | None) -> str:
        variables: dict[str, Any] = {
            "messages": messages,
            "add_generation_prompt": True,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        if request.tools:
            variables["tools"] = [{"type": t.type, "function": _function_dict(t.function)} for t in request.tools]
        if extra:
            variables.update(extra)
        try:
            return self._compiled.render(**variables)
        except HypnosError:
            raise
        except Exception as error:  # jinja errors, sandbox violations: their text (Python names) stays in the log
            logger.info("the chat template failed: %s", error)
            raise TemplateError("it cannot render this conversation") from error


def opening_system_joined(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with the system and developer messages before its first assistant turn joined, in order,
    into one leading system message (unchanged when the only one comes first)."""
    first_answer = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    opening = [i for i in range(first_answer) if messages[i]["role"] in ("system", "developer")]
    if not opening or opening == [0]:
        return messages
    texts = [messages[i]["content"] for i in opening if messages[i]["content"]]
    joined = {**messages[opening[0]], "content": "\n\n".join(texts)}
    skipped = set(opening)
    return [joined, *(m for i, m in enumerate(messages) if i not in skipped)]


def trailing_system_first(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with the system and developer messages that follow its last user or tool turn moved, in
    order, before that turn (unchanged when none follows it, or when an assistant turn comes last)."""
    end = len(messages)
    while end and messages[end - 1]["role"] in ("system", "developer"):
        end -= 1
    last = end - 1
    if end == len(messages) or last < 0 or messages[last]["role"] not in ("user", "tool"):
        return messages
    return [*messages[:last], *messages[end:], messages[last]]


def folded_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with every system message's text joined, in order, into one leading system message."""
    system = [m for m in messages if m["role"] == "system"]
    if not system:
        return messages
    joined = "\n\n".join(m["content"] for m in system if m["content"])
    return [{**system[0], "content": joined}, *(m for m in messages if m["role"] != "system")]


def _function_dict(function: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": function.name}
    if function.description is not None:
        out["description"] = function.description
    if function.parameters is not None:
        out["parameters"] = function.parameters
    return out
