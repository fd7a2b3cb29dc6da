"""The engine contract: what a plugin implements to serve one configured model, for all eight modalities."""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from hypnos.chat import ChatInput
from hypnos.engine_io import (  # the per-modality inputs and results are part of this contract (__all__)
    AudioChunk,
    ChatAccepted,
    ChatEvent,
    ChatFinished,
    ContentDelta,
    DocumentInput,
    EmbeddingInput,
    EmbeddingResult,
    Entity,
    EntityInput,
    EntityResult,
    GeneratedImage,
    ImageInput,
    ImageResult,
    ReasoningDelta,
    RerankInput,
    RerankResult,
    SpeechInput,
    TokenLogprob,
    ToolCallEvent,
    TopLogprob,
    TranscriptionInput,
    TranscriptionResult,
    TranscriptionSegment,
)
from hypnos.engine_methods import (  # the method table is part of this contract (__all__)
    ENGINE_METHODS,
    EngineMethod,
    check_own_methods,
    engine_method,
    method_table,
)
from hypnos.engine_stores import (  # the stores an engine may use
    CachedPrompt,
    KvPark,
    ParkedSlot,
    PromptCache,
    SavedState,
)
from hypnos.errors import HypnosError
from hypnos.option_tables import decode_table
from hypnos.types import (
    KNOWN_ENGINE_KINDS,
    SPEC_KIND_BY_MODALITY,
    LayerPlacementPlan,
    MemoryTier,
    Modality,
    TierSwitchPhases,
)

if TYPE_CHECKING:
    from hypnos.config import LimitsConfig, ModelConfig

__all__ = [  # the contract: what a plugin imports from here (the inputs, results and method table re-exported)
    "ENGINE_METHODS",
    "AudioChunk",
    "CachedPrompt",
    "CancelToken",
    "ChatAccepted",
    "ChatEvent",
    "ChatFinished",
    "ChatInput",
    "ContentDelta",
    "DeviceOutOfMemory",
    "DocumentInput",
    "EmbeddingInput",
    "EmbeddingResult",
    "Engine",
    "EngineCapabilities",
    "EngineContext",
    "EngineFactory",
    "EngineKind",
    "EngineMethod",
    "EngineUnavailable",
    "Entity",
    "EntityInput",
    "EntityResult",
    "GeneratedImage",
    "ImageInput",
    "ImageResult",
    "KvPark",
    "MemoryEstimate",
    "ParkedSlot",
    "PromptCache",
    "ReasoningDelta",
    "RerankInput",
    "RerankResult",
    "SavedState",
    "SpeechInput",
    "TokenLogprob",
    "ToolCallEvent",
    "TopLogprob",
    "TranscriptionInput",
    "TranscriptionResult",
    "TranscriptionSegment",
    "engine_method",
    "method_table",
    "missing_library",
]


class CancelToken:
    """Set when the client goes away or the server shuts down; engines check it per token, chunk, step or page."""

    def __init__(self, owner: str | None = None) -> None:
        self._event = threading.Event()
        self._listeners: list[Callable[[], None]] = []
        # whose request the work serves (its key's label): an engine host its work brings down is charged to it
        self.owner = owner

    def cancel(self) -> None:
        """Ask the work to stop at its next check (and tell the listeners, once)."""
        if self._event.is_set():
            return
        self._event.set()
        for listener in self._listeners:
            listener()

    def on_cancel(self, listener: Callable[[], None]) -> None:
        """Call `listener` when the token is cancelled (at once when it already is): an engine host relays it."""
        self._listeners.append(listener)
        if self._event.is_set():
            listener()

    @property
    def cancelled(self) -> bool:
        """True once cancel() was called (safe from any thread)."""
        return self._event.is_set()


class DeviceOutOfMemory(HypnosError):
    """An engine ran out of device memory mid-request; the scheduler evicts idle models and may retry once."""

    def __init__(self, message: str = "the engine ran out of device memory") -> None:
        super().__init__(507, "device_out_of_memory", message)


class EngineUnavailable(HypnosError):
    """The engine's library is missing or the model cannot be served as configured (503)."""

    def __init__(self, message: str) -> None:
        super().__init__(503, "model_not_available", message)


def missing_library(package: str, extra: str | None = None, kind: EngineKind | None = None) -> EngineUnavailable:
    """The error for a lazily imported engine library that is not installed, naming what to install: the kind's
    `install_hints` entry for the package (a program from apt: `apt-get install espeak-ng`), else pip's command (of
    the plugin's `extra` when given)."""
    hint = kind.install_hints.get(package) if kind is not None else None
    hint = hint or (f"pip install '{extra}'" if extra else f"pip install {package}")
    return EngineUnavailable(f"the engine library `{package}` is not installed ({hint})")


class EngineCapabilities(msgspec.Struct, kw_only=True):
    """What the server must know of a loaded-or-not engine: an image model edits; a speech model's voices."""

    image_edit: bool = False
    voices: list[str] | None = None
    voice_languages: dict[str, str] | None = None  # each voice's own language (BCP 47), where the engine knows it
    # names a client may ask for (OpenAI's alloy, echo, ...) -> the voice of `voices` that speaks for each
    voice_aliases: dict[str, str] | None = None
    # an embedding model trained for shorter vectors (Matryoshka): `dimensions` truncates and renormalizes
    matryoshka: bool = False
    # concurrent requests share library calls (the kit's batching bases); the telemetry's concurrent_slots says how many
    batching: bool = False


class MemoryEstimate(msgspec.Struct, kw_only=True):
    """What a model needs, read from its files: per-layer weights, KV per token, workspace, experts."""

    weight_bytes: int
    layer_bytes: list[int] = []
    non_layer_bytes: int = 0
    kv_bytes_per_token: int = 0
    workspace_bytes: int = 0
    expert_bytes_per_layer: list[int] = []
    projector_bytes: int = 0
    max_context_len: int | None = None
    default_context_len: int = 0
    supports_partial_offload: bool = False

    @property
    def num_layers(self) -> int:
        """How many repeating layers the model has (0 when not layered)."""
        return len(self.layer_bytes)

    @property
    def expert_bytes(self) -> int:
        """All expert tensor bytes (0 for a dense model)."""
        return sum(self.expert_bytes_per_layer)


@dataclass
class EngineContext:
    """What an engine gets besides its model config: where models live, the limits, the device."""

    models_dir: Path
    limits: LimitsConfig
    accelerator: str = "cpu"
    cache_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # KV parking (section 14): where engines park their slots' KV states when leaving tier 1; None = no parking
    kv_park: KvPark | None = None
    # The prompt cache (section 14): saved prompt states by prefix in host RAM and on disk; None = no prompt cache
    prompt_cache: PromptCache | None = None
    # Called (from any thread) when an engine grows a loaded model's context to `cells` in all: the scheduler books
    # the larger KV cache (model id, cells) and funds it again when the model returns from tier 2 (not tier 3)
    context_resized: Callable[[str, int], None] | None = None
    # [server] kv_idle_timeout_secs: how long an idle slot's KV may stay before the engine may drop it (None: never)
    kv_idle_timeout_secs: int | None = None
    # Called (from any thread) when an engine changes the threads it computes with (model id, threads): the status
    # and /metrics show it (the llama batch loop drops threads when the machine's other programs want the cores)
    threads_changed: Callable[[str, int], None] | None = None
    # The decoded option Structs per model id and table (filled by the scheduler from EngineKind.options)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def options_for(self, model: ModelConfig, table: str, struct: type[Any] | None = None) -> Any:
        """The model's decoded `[models.<table>]` Struct; decoded here from model.engine_options when the
        scheduler did not (an engine built by hand in a test), given the Struct type."""
        decoded = self.options.get(model.id, {}).get(table)
        if decoded is not None or struct is None:
            return decoded
        decoded = decode_table(model, table, struct, "<engine options>")
        self.options.setdefault(model.id, {})[table] = decoded
        return decoded


# ---- the engine ------------------------------------------------------------------------------------------------


class Engine:
    """Base class of an engine serving one configured model; the scheduler alone drives its lifecycle.

    Subclasses implement estimate/load/demote/unload and the methods of the modalities they serve; the others
    raise a 400 naming the modality. Blocking library calls never run on the event loop.
    """

    core_threads: int | None = None  # the thread count of the scheduler's last core share (None: never told)
    core_alone: bool = False  # whether no other model computed when the share was given (spinning threads cost none)

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        self.model = model
        self.context = context

    # lifecycle
    def served_modalities(self) -> list[Modality]:
        """The modalities this model serves: its config's, plus what the engine reads in its files (before the first
        request; never by changing the ModelConfig)."""
        return self.model.all_modalities

    def estimate(self) -> MemoryEstimate:
        """Memory needs read from the model's files (cheap: headers only)."""
        raise NotImplementedError

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        """Bring the model to plan.primary_tier (tier 1: ready to serve; tier 2: weights warm in RAM)."""
        raise NotImplementedError

    async def demote(self, tier: MemoryTier) -> None:
        """Move down to tier 2 (warm in RAM) or tier 3 (nothing held)."""
        raise NotImplementedError

    async def unload(self) -> None:
        """Free everything (tier 3); also called at shutdown."""
        await self.demote(MemoryTier.TIER3)

    def capabilities(self) -> EngineCapabilities:
        """What the server must know of this engine (image edits, voices); the base reports nothing special."""
        return EngineCapabilities()

    async def follow_cores(self, cores: list[int], alone: bool = False) -> int | None:
        """The scheduler's core share for the model while it computes (CPU ids, planned with the other models
        computing now; `alone`: no other model computes); an engine that can change its thread count at run time
        follows it and returns the threads it computes with now (None: it cannot, and an engine host is pinned to the
        share instead). The base keeps both in `core_threads` and `core_alone` for engines that read them at their
        next call."""
        self.core_threads = max(1, len(cores))
        self.core_alone = alone
        return None

    def device_oom(self, error: BaseException) -> bool:
        """Whether `error`, raised by this engine's library, means the device ran out of memory (hypnos.kit.device_oom
        recognizes torch's, ONNX Runtime's, CTranslate2's and llama.cpp's): the server then answers 507
        device_out_of_memory after evicting idle models and retrying once. The base recognizes none."""
        return False

    # modalities
    def chat(self, request: ChatInput, cancel: CancelToken) -> AsyncGenerator[ChatEvent, None]:
        """Stream the answer to a chat request as events: a ChatAccepted first where the engine reports one (the
        prompt read and checked, its prefill about to begin), ending with ChatFinished."""
        raise self._unsupported(Modality.TEXT_GENERATION)

    async def embed(self, texts: list[EmbeddingInput], cancel: CancelToken) -> EmbeddingResult:
        """Embed texts (or token-id lists), vectors in input order; an input longer than the model takes is a 400."""
        raise self._unsupported(Modality.EMBEDDINGS)

    async def rerank(self, job: RerankInput, cancel: CancelToken) -> RerankResult:
        """Score each document against the query (a reranker model: llama.cpp rank pooling); served under embeddings."""
        raise self._unsupported(Modality.EMBEDDINGS)

    async def transcribe(self, audio: TranscriptionInput, cancel: CancelToken) -> TranscriptionResult:
        """Transcribe one audio file."""
        raise self._unsupported(Modality.SPEECH_TO_TEXT)

    def speak(self, speech: SpeechInput, cancel: CancelToken) -> AsyncGenerator[AudioChunk, None]:
        """Stream synthesized speech phrase by phrase."""
        raise self._unsupported(Modality.TEXT_TO_SPEECH)

    async def generate_images(self, job: ImageInput, cancel: CancelToken) -> ImageResult:
        """Generate (or, with references, edit) images."""
        raise self._unsupported(Modality.IMAGE_GENERATION)

    def convert_document(self, document: DocumentInput, cancel: CancelToken) -> AsyncGenerator[Any, None]:
        """Convert a document page by page (events defined by the document plugin)."""
        raise self._unsupported(Modality.DOCUMENT_CONVERSION)

    async def extract_entities(self, job: EntityInput, cancel: CancelToken) -> EntityResult:
        """Zero-shot entity extraction."""
        raise self._unsupported(Modality.ENTITY_EXTRACTION)

    def _unsupported(self, modality: Modality) -> HypnosError:
        return HypnosError(400, "invalid_request_error", f"the model `{self.model.id}` does not serve {modality.value}")


EngineFactory = Callable[["ModelConfig", EngineContext], Engine]


@dataclass(frozen=True)
class EngineKind:
    """An engine kind a plugin provides: name, modalities, a factory, and its `[models.<table>]` option tables.

    `options` maps each table to a msgspec Struct (declare it with forbid_unknown_fields=True) that core decodes
    once at config load; `config_keys` names further tables accepted undecoded. Any other table is a config error.
    `spec_kind` is the API's closed EngineKind the wire reports as `engine` (required when `name` is not one of
    them; a mapping by the model's primary modality for a kind standing in for several), `backend` the concrete
    engine reported beside it (default: `name`). `methods` are request methods of the kind's own beside the core's
    ENGINE_METHODS (hypnos.engine_methods), served through hosts and cluster nodes like them.
    """

    name: str
    modalities: frozenset[Modality]
    factory: EngineFactory
    config_keys: frozenset[str] = frozenset()
    description: str = ""
    options: Mapping[str, type[Any]] = field(default_factory=dict, hash=False, compare=False)
    # the environment an engine host of this kind starts with unless the model's [models.process] says otherwise:
    # measured defaults such as GOMP_SPINCOUNT for a torch engine (llama.cpp's threads are faster spinning)
    process_env: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    # the CPU niceness such a host starts with unless [models.process] nice says otherwise: batch engines (entities,
    # documents, images) yield the cores to interactive ones (a chat decoding, speech) when both want them
    process_nice: int = field(default=0, hash=False, compare=False)
    spec_kind: str | Mapping[Modality, str] = field(default="", hash=False, compare=False)
    backend: str = ""
    methods: tuple[EngineMethod, ...] = field(default=(), hash=False, compare=False)
    # reads the architecture a model's weights file reports (a GGUF's general.architecture) without loading it: the
    # pool API and the catalog check it against the catalog's tested architectures of this kind; raises ValueError
    # or OSError for a file this kind cannot read. None: the kind's files are not checked so
    architecture_of: Callable[[Path], str | None] | None = field(default=None, hash=False, compare=False)
    # how to install each library the kind's engines need, where pip is not the way (missing_library reads it)
    install_hints: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    # how long a request may go without progress (no item, no cancellation check) before its host is killed, unless
    # [models.process] hang_secs says otherwise: a few times the engine's longest step
    hang_secs: float = field(default=300.0, hash=False, compare=False)

    def __post_init__(self) -> None:
        check_own_methods(self.name, self.methods)
        declared = [self.spec_kind] if isinstance(self.spec_kind, str) else list(self.spec_kind.values())
        wrong = [kind for kind in declared if kind and kind not in KNOWN_ENGINE_KINDS]
        if wrong:
            known = ", ".join(KNOWN_ENGINE_KINDS)
            raise ValueError(f"the engine kind `{self.name}` declares spec_kind {wrong[0]!r}: not one of {known}")

    def wire_kind(self, modality: Modality) -> str:
        """The API's EngineKind (appendix) a model of this primary modality is reported as: the declared one, the
        kind's own name when it is one, else the appendix's kind for the modality."""
        if isinstance(self.spec_kind, str):
            chosen = self.spec_kind or self.name
        else:
            chosen = self.spec_kind.get(modality) or next(iter(self.spec_kind.values()), "")
        return chosen if chosen in KNOWN_ENGINE_KINDS else SPEC_KIND_BY_MODALITY[modality]

    @property
    def wire_backend(self) -> str:
        """The concrete backend reported next to the EngineKind."""
        return self.backend or self.name

    @property
    def tables(self) -> frozenset[str]:
        """Every `[models.<table>]` name this kind accepts."""
        return frozenset(self.config_keys) | frozenset(self.options)
