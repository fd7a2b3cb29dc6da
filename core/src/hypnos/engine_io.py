"""The engine contract's per-modality inputs and results (re-exported by hypnos.engine)."""

from __future__ import annotations

import msgspec

from hypnos.openai import ToolCall
from hypnos.types import EngineTiming


class TopLogprob(msgspec.Struct, kw_only=True):
    """One candidate token of `top_logprobs`: its text, log probability and UTF-8 bytes (OpenAI's shape)."""

    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(msgspec.Struct, kw_only=True):
    """A generated token's log probability and the most likely alternatives (`logprobs.content[]`)."""

    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = []


class ChatAccepted(msgspec.Struct, tag="accepted", kw_only=True):
    """The first event of an engine that reports one: the prompt was read and checked, its prefill begins now."""

    prompt_tokens: int
    cached_tokens: int = 0  # of the prompt's tokens, those a prefix cache already holds (not prefilled again)
    index: int = 0


class ContentDelta(msgspec.Struct, tag="content"):
    """A piece of the answer's text of choice `index`, with the tokens' log probabilities when asked for."""

    text: str
    index: int = 0
    logprobs: list[TokenLogprob] | None = None


class ReasoningDelta(msgspec.Struct, tag="reasoning"):
    """A piece of the model's thoughts (reasoning_content) of choice `index`."""

    text: str
    index: int = 0


class ToolCallEvent(msgspec.Struct, tag="tool_call"):
    """One whole tool call the model asked for in choice `index`."""

    call: ToolCall
    index: int = 0


class ChatFinished(msgspec.Struct, tag="finished", kw_only=True):
    """The last event of a choice (every choice of `n` ends with its own): why it stopped, usage and timings."""

    finish_reason: str
    index: int = 0
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    timing: EngineTiming = msgspec.field(default_factory=EngineTiming)
    # the `stop` string that ended the choice (finish_reason "stop"), None when it ended otherwise
    stop_sequence: str | None = None


ChatEvent = ChatAccepted | ContentDelta | ReasoningDelta | ToolCallEvent | ChatFinished


# One embeddings input: a text, or the token ids the client already made.
EmbeddingInput = str | list[int]


class EmbeddingResult(msgspec.Struct, kw_only=True):
    """Vectors in input order, with the tokens the inputs took."""

    vectors: list[list[float]]
    prompt_tokens: int
    timing: EngineTiming = msgspec.field(default_factory=EngineTiming)


class RerankInput(msgspec.Struct, kw_only=True):
    """A query and the documents to score against it (POST /v1/rerank)."""

    query: str
    documents: list[str]


class RerankResult(msgspec.Struct, kw_only=True):
    """One relevance score per document, in document order (higher is more relevant), and the tokens read."""

    scores: list[float]
    prompt_tokens: int
    timing: EngineTiming = msgspec.field(default_factory=EngineTiming)


class TranscriptionInput(msgspec.Struct, kw_only=True):
    """Audio to transcribe, with the optional language hint and prompt: an audio file, or with `pcm_rate` raw 16-bit
    little-endian mono PCM at that rate (a realtime session's turn). hypnos.kit.audio reads either
    (transcription_audio) or gives the file (audio_file)."""

    audio: bytes
    filename: str | None = None
    language: str | None = None
    prompt: str | None = None
    pcm_rate: int | None = None


class TranscriptionSegment(msgspec.Struct, kw_only=True):
    """One timed stretch of a transcript, seconds from the start of the audio."""

    start: float
    end: float
    text: str


class TranscriptionResult(msgspec.Struct, kw_only=True):
    """The transcript, how long the audio was, and its timed segments and language when the engine knows them."""

    text: str
    duration_secs: float | None = None
    segments: list[TranscriptionSegment] | None = None
    language: str | None = None
    timing: EngineTiming = msgspec.field(default_factory=EngineTiming)


class SpeechInput(msgspec.Struct, kw_only=True):
    """Text to speak, the voice (one of the engine's voices: the route picked it), speed and language."""

    text: str
    voice: str
    speed: float = 1.0
    language: str | None = "en"  # a hint; None (a realtime session's speech): the voice's own language


class AudioChunk(msgspec.Struct, kw_only=True):
    """A piece of synthesized speech: 16-bit little-endian mono PCM at sample_rate."""

    pcm16: bytes
    sample_rate: int = 24000


class ImageInput(msgspec.Struct, kw_only=True):
    """An image generation or edit job, sizes already clamped."""

    prompt: str
    n: int = 1
    width: int = 1024
    height: int = 1024
    negative_prompt: str | None = None
    steps: int | None = None
    seed: int = 0
    cfg_scale: float | None = None
    references: list[bytes] = []


class GeneratedImage(msgspec.Struct, kw_only=True):
    """One PNG and the seed it was made with."""

    png: bytes
    seed: int


class ImageResult(msgspec.Struct, kw_only=True):
    """The images of one job."""

    images: list[GeneratedImage]
    timing: EngineTiming = msgspec.field(default_factory=EngineTiming)


class EntityInput(msgspec.Struct, kw_only=True):
    """Texts and free-text labels for zero-shot entity extraction."""

    texts: list[str]
    labels: list[str]
    threshold: float = 0.5
    flat: bool | None = None  # None: the model's default


class Entity(msgspec.Struct, kw_only=True):
    """One span: character offsets [start, end) in Unicode scalar values."""

    text: str
    label: str
    start: int
    end: int
    score: float


class EntityResult(msgspec.Struct, kw_only=True):
    """Entities per input text, in input order."""

    entities: list[list[Entity]]
    timing: EngineTiming = msgspec.field(default_factory=EngineTiming)


class DocumentInput(msgspec.Struct, kw_only=True):
    """A document to convert, with the page range and options of section 12."""

    data: bytes
    filename: str | None = None
    pages: tuple[int, int] | None = None
    ocr: bool = True
    output_format: str = "markdown"
