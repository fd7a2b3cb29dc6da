"""The realtime session's settings: session.update in the beta or the GA shape, and session.created/updated."""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any

import msgspec
from hypnos.scheduler import Scheduler
from hypnos.types import Modality

from hypnos_server.realtime.events import RealtimeError

SAMPLE_RATE = 24000  # pcm16 mono little-endian, the only audio format the session speaks in and out
AUDIO_FORMATS = {"pcm16", "audio/pcm"}


class TurnDetection(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """server_vad settings: threshold 0..1, the audio kept before speech, the silence that ends a turn."""

    type: str = "server_vad"
    threshold: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.5
    prefix_padding_ms: Annotated[int, msgspec.Meta(ge=0, le=5000)] = 300
    silence_duration_ms: Annotated[int, msgspec.Meta(ge=20, le=10000)] = 500
    create_response: bool = True
    interrupt_response: bool = True


class HypnosModels(msgspec.Struct, kw_only=True):
    """The `hypnos` extension of session.update: which pool models transcribe and speak, which detector hears turns."""

    transcription_model: str | None = None
    speech_model: str | None = None
    speech_detector: str | None = None


class Tool(msgspec.Struct, kw_only=True):
    """A function tool in the Realtime shape (flat: name, description, parameters)."""

    name: str
    type: str = "function"
    description: str | None = None
    parameters: dict[str, Any] | None = None


class SessionConfig(msgspec.Struct, kw_only=True):
    """What the session is set to now."""

    id: str
    model: str
    transcription_model: str | None
    speech_model: str | None
    speech_detector: str = "energy"  # the server VAD's detector (vad.SpeechDetectorKind name)
    instructions: str = ""
    voice: str = "alloy"
    modalities: list[str] = msgspec.field(default_factory=lambda: ["text", "audio"])
    turn_detection: TurnDetection | None = msgspec.field(default_factory=TurnDetection)
    transcribe_input: bool = True  # input_audio_transcription is set: transcripts are sent as events
    tools: list[Tool] = []
    tool_choice: Any = "auto"
    temperature: float | None = None
    max_output_tokens: int | None = None

    @property
    def audio_out(self) -> bool:
        """True when responses speak (else text only)."""
        return "audio" in self.modalities


def first_model(scheduler: Scheduler, modality: Modality) -> str | None:
    """The first enabled pool model serving `modality` (the session's default transcriber or speaker)."""
    for state in scheduler.models():
        if state.enabled and modality in state.modalities:
            return state.id
    return None


def _check_format(value: Any, param: str) -> None:
    kind = value.get("type") if isinstance(value, dict) else value
    rate = value.get("rate", SAMPLE_RATE) if isinstance(value, dict) else SAMPLE_RATE
    if not isinstance(kind, str) or kind not in AUDIO_FORMATS or rate != SAMPLE_RATE:
        raise RealtimeError(f"Unsupported audio format {str(value)[:64]}: only pcm16 at {SAMPLE_RATE} Hz", param=param)


def _convert(value: Any, type_: type[Any], param: str) -> Any:
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as error:
        raise RealtimeError(f"Invalid value for `{param}`: {error}", param=param) from None


def _turn_detection(value: Any) -> TurnDetection | None:
    if value is None:
        return None
    detection = _convert(value, TurnDetection, "session.turn_detection")
    if detection.type not in {"server_vad", "semantic_vad"}:  # semantic_vad is served by the same detector
        raise RealtimeError(f"Unsupported turn_detection type `{detection.type}`", param="session.turn_detection.type")
    return detection


def _pick(scheduler: Scheduler, model: Any, modality: Modality, param: str) -> str:
    if not isinstance(model, str) or not model:
        raise RealtimeError(f"Invalid value for `{param}`: expected a model id", param=param)
    state = next((state for state in scheduler.models() if state.id == model), None)
    if state is None or not state.enabled or modality not in state.modalities:
        raise RealtimeError(f"The model `{model}` does not serve {modality.value}", "model_not_found", param)
    return model


def _object(holder: dict[str, Any], key: str) -> dict[str, Any]:
    """holder[key] when it is a JSON object, else an empty one."""
    value = holder.get(key)
    return value if isinstance(value, dict) else {}


def apply_update(
    config: SessionConfig, session: Any, scheduler: Scheduler, detectors: Collection[str] = ("energy",)
) -> SessionConfig:
    """The config after one session.update (beta fields or GA `audio.input` / `audio.output`); refuses bad values.
    `detectors`: the speech detectors the server has."""
    if not isinstance(session, dict):
        raise RealtimeError("`session` must be an object", param="session")
    changes: dict[str, Any] = {}
    audio = _object(session, "audio")
    audio_in, audio_out = _object(audio, "input"), _object(audio, "output")
    for value, param in (
        (session.get("input_audio_format"), "session.input_audio_format"),
        (session.get("output_audio_format"), "session.output_audio_format"),
        (audio_in.get("format"), "session.audio.input.format"),
        (audio_out.get("format"), "session.audio.output.format"),
    ):
        if value is not None:
            _check_format(value, param)
    if "instructions" in session:
        changes["instructions"] = _convert(session["instructions"] or "", str, "session.instructions")
    voice = audio_out.get("voice", session.get("voice"))
    if voice is not None:
        changes["voice"] = _convert(voice, str, "session.voice")
    modalities = session.get("output_modalities", session.get("modalities"))
    if modalities is not None:
        listed = _convert(modalities, list[str], "session.modalities")
        if not listed or not set(listed) <= {"text", "audio"}:
            raise RealtimeError("`modalities` must name text and/or audio", param="session.modalities")
        changes["modalities"] = sorted(set(listed) | {"text"}, reverse=True)
    for holder in (session, audio_in):
        if "turn_detection" in holder:
            changes["turn_detection"] = _turn_detection(holder["turn_detection"])
    transcription = audio_in.get("transcription", session.get("input_audio_transcription", ...))
    if transcription is not ...:
        changes["transcribe_input"] = transcription is not None
        wanted = transcription.get("model") if isinstance(transcription, dict) else None
        if isinstance(wanted, str) and wanted in {s.id for s in scheduler.models()}:  # OpenAI names: the default
            changes["transcription_model"] = _pick(scheduler, wanted, Modality.SPEECH_TO_TEXT, "session.transcription")
    if "tools" in session:
        changes["tools"] = _convert(session["tools"] or [], list[Tool], "session.tools")
    if "tool_choice" in session:
        changes["tool_choice"] = session["tool_choice"]
    if session.get("temperature") is not None:
        changes["temperature"] = _convert(session["temperature"], float, "session.temperature")
    limit = session.get("max_output_tokens", session.get("max_response_output_tokens"))
    if limit is not None:
        changes["max_output_tokens"] = None if limit == "inf" else _convert(limit, int, "session.max_output_tokens")
    hypnos = _convert(session.get("hypnos") or {}, HypnosModels, "session.hypnos")
    if hypnos.transcription_model is not None:
        changes["transcription_model"] = _pick(
            scheduler, hypnos.transcription_model, Modality.SPEECH_TO_TEXT, "session.hypnos.transcription_model"
        )
    if hypnos.speech_model is not None:
        changes["speech_model"] = _pick(
            scheduler, hypnos.speech_model, Modality.TEXT_TO_SPEECH, "session.hypnos.speech_model"
        )
    if hypnos.speech_detector is not None:
        if hypnos.speech_detector not in detectors:
            known = ", ".join(sorted(detectors))
            message = f"No speech detector `{hypnos.speech_detector[:64]}` (this server has: {known})"
            raise RealtimeError(message, param="session.hypnos.speech_detector")
        changes["speech_detector"] = hypnos.speech_detector
    return msgspec.structs.replace(config, **changes)


def is_ga(session: Any) -> bool:
    """True for a session.update in the GA shape (`type: realtime` or an `audio` object)."""
    return isinstance(session, dict) and (session.get("type") == "realtime" or isinstance(session.get("audio"), dict))


def render(config: SessionConfig) -> dict[str, Any]:
    """The session object of session.created / session.updated: the beta fields and the GA ones side by side (their
    names never collide), so either kind of client reads its own."""
    detection = msgspec.to_builtins(config.turn_detection) if config.turn_detection is not None else None
    transcription = {"model": config.transcription_model} if config.transcribe_input else None
    limit = config.max_output_tokens if config.max_output_tokens is not None else "inf"
    audio_format = {"type": "audio/pcm", "rate": SAMPLE_RATE}
    return {
        "id": config.id,
        "object": "realtime.session",
        "type": "realtime",
        "model": config.model,
        "instructions": config.instructions,
        "modalities": config.modalities,
        "output_modalities": ["audio"] if config.audio_out else ["text"],
        "voice": config.voice,
        "input_audio_format": "pcm16",
        "output_audio_format": "pcm16",
        "input_audio_transcription": transcription,
        "turn_detection": detection,
        "audio": {
            "input": {"format": audio_format, "transcription": transcription, "turn_detection": detection},
            "output": {"format": audio_format, "voice": config.voice},
        },
        "tools": [msgspec.to_builtins(tool) for tool in config.tools],
        "tool_choice": config.tool_choice,
        "temperature": config.temperature,
        "max_response_output_tokens": limit,
        "max_output_tokens": limit,
        "hypnos": {
            "transcription_model": config.transcription_model,
            "speech_model": config.speech_model,
            "speech_detector": config.speech_detector,
        },
    }
