"""A third-party plugin with a request method of its own: `moderate` (text classification, leased as entity
extraction), its engine kind and its route POST /v1/moderations, written as a plugin outside the repo would be."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.engine import EngineKind, EngineMethod, MemoryEstimate, engine_method
from hypnos.errors import invalid_request
from hypnos.hookspecs import hookimpl
from hypnos.kit.staged import StagedEngine, check_cancelled
from hypnos.types import EngineTiming, LayerPlacementPlan, Modality
from hypnos_server.plugin_api import InferenceRun, decode_json, json_response, ready_guard
from litestar import Request, Response, post


class ModerationInput(msgspec.Struct, kw_only=True):
    """Texts to classify."""

    texts: list[str]


class ModerationResult(msgspec.Struct, kw_only=True):
    """Per text: whether it is flagged, and the flagged words it holds."""

    flagged: list[bool]
    words: list[list[str]]
    timing: EngineTiming = msgspec.field(default_factory=EngineTiming)


MODERATE = EngineMethod("moderate", ModerationInput, ModerationResult, Modality.ENTITY_EXTRACTION)


class ModerationEngine(StagedEngine):
    """Flags the words of its word list (the model's `[models.moderation] words`), one text per cancellation step."""

    def estimate(self) -> MemoryEstimate:
        return MemoryEstimate(weight_bytes=1 << 20)

    def build(self, plan: LayerPlacementPlan) -> None:
        self.words = frozenset(self.model.engine_options.get("moderation", {}).get("words", ["bad"]))

    def release_device(self) -> None:
        self.words = frozenset()

    async def moderate(self, job: ModerationInput, cancel: Any) -> ModerationResult:
        """Each text's flagged words; a 400 for an empty text."""
        self.require_ready()
        if any(not text.strip() for text in job.texts):
            raise invalid_request("`input` holds an empty text")
        words = []
        for text in job.texts:
            check_cancelled(cancel)
            words.append(sorted(self.words & set(text.lower().split())))
        check_cancelled(cancel)
        return ModerationResult(flagged=[bool(found) for found in words], words=words)


def moderation_kind() -> EngineKind:
    """The `moderation` kind: entity extraction's modality, and the `moderate` method."""
    modalities = frozenset({Modality.ENTITY_EXTRACTION})
    return EngineKind(
        "moderation", modalities, ModerationEngine, config_keys=frozenset({"moderation"}), methods=(MODERATE,)
    )


class ModerationRequest(msgspec.Struct, kw_only=True):
    """POST /v1/moderations body."""

    model: str
    input: str | list[str]


@post("/v1/moderations", guards=[ready_guard], status_code=200)
async def moderations(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Classify the texts with the model's `moderate`."""
    body = await decode_json(request, ModerationRequest)
    job = ModerationInput(texts=[body.input] if isinstance(body.input, str) else body.input)
    async with InferenceRun(request, body.model, [MODERATE.modality]) as run:
        result = await run.call(lambda engine: engine_method(engine, "moderate")(job, run.lease.cancel))
        telemetry = run.telemetry(result.timing)
    results = [
        {"flagged": flagged, "words": words} for flagged, words in zip(result.flagged, result.words, strict=True)
    ]
    return json_response({"model": body.model, "results": results, "hypnos_telemetry": telemetry})


@hookimpl
def hypnos_engine_kinds() -> list[EngineKind]:
    """The moderation kind."""
    return [moderation_kind()]


@hookimpl
def hypnos_routes() -> list[Any]:
    """POST /v1/moderations."""
    return [moderations]
