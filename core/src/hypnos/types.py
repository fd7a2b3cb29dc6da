"""Shared wire types of the spec's appendix (section 18) and the telemetry object (section 5)."""

from __future__ import annotations

import enum

import msgspec


class MemoryTier(enum.StrEnum):
    """Where a model lives: GPU memory, warm host RAM, or disk only."""

    TIER1 = "tier1_gpu_vram"
    TIER2 = "tier2_pinned_ram"
    TIER3 = "tier3_nvme_ssd"

    @property
    def rank(self) -> int:
        """1 for GPU, 2 for RAM, 3 for disk: lower is hotter."""
        return {"tier1_gpu_vram": 1, "tier2_pinned_ram": 2, "tier3_nvme_ssd": 3}[self.value]


class Modality(enum.StrEnum):
    """What a model serves."""

    TEXT_GENERATION = "text_generation"
    VISION = "vision"
    SPEECH_TO_TEXT = "speech_to_text"
    TEXT_TO_SPEECH = "text_to_speech"
    EMBEDDINGS = "embeddings"
    IMAGE_GENERATION = "image_generation"
    DOCUMENT_CONVERSION = "document_conversion"
    ENTITY_EXTRACTION = "entity_extraction"


class ModelPriority(enum.StrEnum):
    """Eviction priority: lower goes first, realtime_pinned never."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    REALTIME_PINNED = "realtime_pinned"

    @property
    def rank(self) -> int:
        """Ordering key: low < normal < high < realtime_pinned."""
        return {"low": 0, "normal": 1, "high": 2, "realtime_pinned": 3}[self.value]


class MoeOffload(enum.StrEnum):
    """Mixture-of-Experts expert offload mode (spec section 6)."""

    OFF = "off"
    AUTO = "auto"
    ON = "on"


# The API's closed EngineKind list (appendix): what the wire reports as `engine`. Plugins register kinds under any
# name (the config's `engine`), each declaring which of these it is; the concrete one goes out as `backend`.
KNOWN_ENGINE_KINDS = ("ggml_llama", "ggml_whisper", "ggml_diffusion", "onnx_runtime", "docling", "gliner")

# The appendix's kind for each primary modality: what a model is reported as when its engine kind is not installed
# here (no plugin declares it), and what the test kit's fake engine declares.
SPEC_KIND_BY_MODALITY = {
    Modality.TEXT_GENERATION: "ggml_llama",
    Modality.VISION: "ggml_llama",
    Modality.EMBEDDINGS: "ggml_llama",
    Modality.SPEECH_TO_TEXT: "ggml_whisper",
    Modality.TEXT_TO_SPEECH: "onnx_runtime",
    Modality.IMAGE_GENERATION: "ggml_diffusion",
    Modality.DOCUMENT_CONVERSION: "docling",
    Modality.ENTITY_EXTRACTION: "gliner",
}


class LayerPlacementPlan(msgspec.Struct, kw_only=True):
    """How a model's layers and bytes are split across the tiers (appendix)."""

    primary_tier: MemoryTier = MemoryTier.TIER3
    gpu_layers: int = 0
    pinned_ram_layers: int = 0
    ssd_layers: int = 0
    vram_weight_bytes: int = 0
    vram_kv_and_workspace_bytes: int = 0
    pinned_ram_bytes: int = 0
    allocated_context_len: int = 0
    cpu_expert_layers: int = 0

    @property
    def vram_bytes(self) -> int:
        """Everything this placement books in tier 1."""
        return self.vram_weight_bytes + self.vram_kv_and_workspace_bytes


class EngineTiming(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Engine timings; each field is present only when the modality measures it (section 5)."""

    queue_ms: float | None = None
    context_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    ttft_ms: float | None = None
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    cached_tokens: int | None = None
    concurrent_slots: int | None = None
    audio_secs: float | None = None
    rtf: float | None = None
    ttfa_ms: float | None = None
    pages: int | None = None
    ms_per_page: float | None = None
    steps: int | None = None
    steps_per_s: float | None = None


class TierSwitchPhases(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Phases of a load into tier 1 (section 5)."""

    load_mode: str | None = None
    weights_ms: float | None = None
    projector_ms: float | None = None
    context_ms: float | None = None
    total_ms: float | None = None
    kv_restore_ms: float | None = None
    kv_restored_tokens: int | None = None


class HypnosTelemetry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The hypnos_telemetry object on every inference response (section 5)."""

    previous_tier: MemoryTier
    placement: LayerPlacementPlan
    tier_switch_latency_ms: float
    inference_latency_ms: float
    evicted_models: list[str]
    engine: EngineTiming
    tier_switch_phases: TierSwitchPhases | None = None


class ErrorDetail(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The inner error object; param and code appear on errors with a code (auth, quota, a named field)."""

    message: str
    type: str
    param: str | msgspec.UnsetType | None = msgspec.UNSET
    code: str | msgspec.UnsetType = msgspec.UNSET


class ErrorBody(msgspec.Struct):
    """The error body every failing route answers with (section 4)."""

    error: ErrorDetail
