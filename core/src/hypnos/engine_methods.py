"""The engine's request methods, declared once (re-exported by hypnos.engine): the host proxy and dispatch, the
cluster's remote engine and node agent, the conformance suite and the fake engine are all driven from this table.

A plugin may declare methods of its own on its EngineKind (`methods=`): each names its input, result, the modality a
lease for it asks for, and whether it streams; its routes (the server's `hypnos_routes` hook) call it through
`engine_method(engine, name)`, which works the same on a local engine, an engine host's proxy and a cluster node.
"""

from __future__ import annotations

import keyword
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from hypnos.chat import ChatInput
from hypnos.engine_io import (
    AudioChunk,
    ChatEvent,
    DocumentInput,
    EmbeddingInput,
    EmbeddingResult,
    EntityInput,
    EntityResult,
    ImageInput,
    ImageResult,
    RerankInput,
    RerankResult,
    SpeechInput,
    TranscriptionInput,
    TranscriptionResult,
)
from hypnos.errors import HypnosError
from hypnos.types import Modality

# the engine's lifecycle and questions (no cancellation token): never a request method's name
LIFECYCLE_METHODS = frozenset(
    {"load", "demote", "unload", "capabilities", "served_modalities", "estimate", "device_oom", "follow_cores"}
)


@dataclass(frozen=True)
class EngineMethod:
    """One request method: `engine.<name>(input, cancel)` returns `result` (an async iterator of `result` items
    when `streams`); a lease for it asks for `modality`."""

    name: str
    input: Any
    result: Any
    modality: Modality
    streams: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name) or self.name.startswith("_"):
            raise ValueError(f"the engine method name {self.name!r} is not a public Python identifier")


ENGINE_METHODS: tuple[EngineMethod, ...] = (
    EngineMethod("chat", ChatInput, ChatEvent, Modality.TEXT_GENERATION, streams=True),
    EngineMethod("embed", list[EmbeddingInput], EmbeddingResult, Modality.EMBEDDINGS),
    EngineMethod("rerank", RerankInput, RerankResult, Modality.EMBEDDINGS),
    EngineMethod("transcribe", TranscriptionInput, TranscriptionResult, Modality.SPEECH_TO_TEXT),
    EngineMethod("speak", SpeechInput, AudioChunk, Modality.TEXT_TO_SPEECH, streams=True),
    EngineMethod("generate_images", ImageInput, ImageResult, Modality.IMAGE_GENERATION),
    EngineMethod("convert_document", DocumentInput, Any, Modality.DOCUMENT_CONVERSION, streams=True),
    EngineMethod("extract_entities", EntityInput, EntityResult, Modality.ENTITY_EXTRACTION),
)
CORE_METHODS: dict[str, EngineMethod] = {method.name: method for method in ENGINE_METHODS}


def check_own_methods(kind_name: str, methods: Iterable[EngineMethod]) -> None:
    """Raise ValueError for a kind's own method that reuses a core or lifecycle name, or is declared twice."""
    seen: set[str] = set()
    for method in methods:
        if method.name in CORE_METHODS or method.name in LIFECYCLE_METHODS or method.name in seen:
            raise ValueError(f"the engine kind `{kind_name}` declares the method `{method.name}`, already taken")
        seen.add(method.name)


class DeclaresMethods(Protocol):
    """An engine kind, as far as its own methods go."""

    @property
    def methods(self) -> tuple[EngineMethod, ...]:
        """The kind's own request methods."""
        ...


def method_table(kinds: Iterable[DeclaresMethods] = ()) -> dict[str, EngineMethod]:
    """Every request method by name: the core's and those the given kinds declare of their own."""
    table = dict(CORE_METHODS)
    for kind in kinds:
        table.update((method.name, method) for method in kind.methods)
    return table


def engine_method(engine: Any, name: str) -> Callable[..., Any]:
    """`engine.<name>` (a core method or a kind's own), or a 400 when this model's engine has no such method."""
    method: Callable[..., Any] | None = getattr(engine, name, None)
    if method is None or not callable(method):
        model = getattr(getattr(engine, "model", None), "id", None) or getattr(engine, "model_id", "?")
        raise HypnosError(400, "invalid_request_error", f"the model `{model}` does not serve `{name}`")
    return method


# how a stand-in engine (an engine host's proxy, a cluster node's) hands a call on: (self, name, argument, cancel)
Handoff = Callable[[Any, str, Any, Any], Any]


def forwarder(method: EngineMethod, call: Handoff, stream: Handoff) -> Callable[..., Any]:
    """A stand-in engine's `method`: `await call(self, name, argument, cancel)` for a whole answer, the async
    iterator `stream(self, name, argument, cancel)` for a stream."""
    name = method.name
    forward: Callable[..., Any]
    if method.streams:

        def forward(self: Any, argument: Any, cancel: Any) -> Any:
            return stream(self, name, argument, cancel)

    else:

        async def forward(self: Any, argument: Any, cancel: Any) -> Any:
            answer: Awaitable[Any] = call(self, name, argument, cancel)
            return await answer

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = f"`{name}` handed on ({'a stream' if method.streams else 'a whole answer'})."
    return forward


def forward_core_methods(cls: type, call: Handoff, stream: Handoff) -> None:
    """Give a stand-in engine class every core request method of the table, each handed on by `call` or `stream`."""
    for method in ENGINE_METHODS:
        setattr(cls, method.name, forwarder(method, call, stream))
