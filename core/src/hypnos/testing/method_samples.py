"""One small request per method of the engine table, which the fake engine answers: the tests that walk every path
(this process, an engine host, a cluster node) send these; a method added to the table without one fails them."""

from __future__ import annotations

import types
from typing import Any

from hypnos.chat import InputMessage, TextPart
from hypnos.engine import (
    ChatInput,
    DocumentInput,
    EngineMethod,
    EntityInput,
    ImageInput,
    RerankInput,
    SpeechInput,
    TranscriptionInput,
    engine_method,
)

SAMPLES: dict[str, Any] = {
    "chat": ChatInput(messages=[InputMessage(role="user", parts=[TextPart(text="a question")])], max_tokens=8),
    "embed": ["one", "two"],
    "rerank": RerankInput(query="red fox", documents=["a red fox", "a blue whale"]),
    "transcribe": TranscriptionInput(audio=b"\x00" * 64),
    "speak": SpeechInput(text="hi there. again", voice="a"),
    "generate_images": ImageInput(prompt="a fox", width=8, height=8),
    "convert_document": DocumentInput(data=b"# hello"),
    "extract_entities": EntityInput(texts=["Ada wrote"], labels=["person"]),
}


def sample_request(method: EngineMethod) -> Any:
    """The sample input of this method (a KeyError naming it when the table grew without a sample)."""
    return SAMPLES[method.name]


async def sample_answer(engine: Any, method: EngineMethod, cancel: Any) -> Any:
    """The engine's answer to the method's sample: a whole result, or a stream's items as a list."""
    call = engine_method(engine, method.name)
    if method.streams:
        return [item async for item in call(sample_request(method), cancel)]
    return await call(sample_request(method), cancel)


def is_result(value: Any, method: EngineMethod) -> bool:
    """Whether `value` (a whole result, or one item of a stream) has the type the table declares."""
    result = method.result
    if result is Any:
        return True
    if isinstance(result, types.UnionType):
        return isinstance(value, result.__args__)
    return isinstance(value, result)
