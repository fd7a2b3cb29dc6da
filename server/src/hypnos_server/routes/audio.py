"""POST /v1/audio/transcriptions (section 9) and POST /v1/audio/speech (section 10)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from hypnos.engine import AudioChunk, EngineCapabilities, SpeechInput, TranscriptionInput
from hypnos.errors import invalid_request
from hypnos.kit.audio import check_wav, wav_duration, wav_header
from hypnos.openai import SpeechRequest, TranscriptionJsonRequest
from hypnos.scheduler import Lease
from hypnos.types import EngineTiming, Modality
from litestar import Request, Response, post
from litestar.datastructures import UploadFile
from litestar.response import Stream

from hypnos_server.errors import field_error
from hypnos_server.routes.inference import (
    InferenceRun,
    decode_json,
    json_response,
    read_form,
    ready_guard,
    wait_headers,
)
from hypnos_server.state import hypnos_state, request_context
from hypnos_server.transcripts import MEDIA_TYPES, check_format, plain_body, verbose

logger = logging.getLogger(__name__)

WAV_FALLBACK_FORMATS = {"wav", "mp3", "opus", "aac", "flac"}


def pick_voice(voice: str, capabilities: EngineCapabilities) -> str:
    """The voice a model speaks `voice` in: one of its voices by that name, else the voice its engine names as the
    alias (OpenAI's alloy, echo, ...), else its first voice; a model listing no voices gets `voice` as asked."""
    voices, aliases = capabilities.voices, capabilities.voice_aliases or {}
    if voices and voice in voices:
        return voice
    if voice in aliases:
        return aliases[voice]
    return voices[0] if voices else voice


async def _transcription_input(request: Request[Any, Any, Any]) -> tuple[str, TranscriptionInput, str]:
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/"):
        form = await read_form(request)
        model = form.get("model")
        upload = form.get("file")
        if not isinstance(model, str) or not model:
            raise invalid_request("Missing required field `model`")
        if not isinstance(upload, UploadFile):
            raise invalid_request("Missing required field `file` (the audio file part)")
        audio = await upload.read()
        language, prompt, fmt = form.get("language"), form.get("prompt"), form.get("response_format")
        return (
            model,
            TranscriptionInput(
                audio=audio,
                filename=upload.filename,
                language=language if isinstance(language, str) and language else None,
                prompt=prompt if isinstance(prompt, str) and prompt else None,
            ),
            check_format(fmt if isinstance(fmt, str) else None),
        )
    body = await decode_json(request, TranscriptionJsonRequest)
    try:
        audio = bytes(body.audio_bytes)
    except ValueError:
        raise field_error(msgspec.ValidationError("Expected byte values 0..255 - at `$.audio_bytes`")) from None
    return (
        body.model,
        TranscriptionInput(audio=audio, filename=body.filename, language=body.language, prompt=body.prompt),
        check_format(body.response_format),
    )


@post("/v1/audio/transcriptions", guards=[ready_guard], status_code=200)
async def transcriptions(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Transcribe an uploaded audio file (multipart, or JSON with audio_bytes)."""
    state = hypnos_state(request)
    context = request_context(request)
    model, job, fmt = await _transcription_input(request)
    context.record.model = model
    if not job.audio:
        raise invalid_request("The audio file is empty")
    if len(job.audio) > state.settings.limits.max_audio_bytes:
        raise invalid_request(f"The audio is {len(job.audio)} bytes, above limits.max_audio_bytes")
    check_wav(job.audio)
    async with InferenceRun(request, model, [Modality.SPEECH_TO_TEXT]) as run:
        result = await run.call(lambda engine: engine.transcribe(job, run.lease.cancel))
        duration = result.duration_secs if result.duration_secs is not None else wav_duration(job.audio)
        timing = result.timing
        if duration and timing.audio_secs is None:
            timing.audio_secs = duration
        if duration and timing.rtf is None:
            timing.rtf = round(run.inference_ms / 1000 / duration, 4)
        telemetry = run.telemetry(timing)
        headers = run.headers()
        inference_ms = run.inference_ms
    context.record.output_text = result.text  # observability
    if fmt in MEDIA_TYPES:
        body = plain_body(fmt, result, duration).encode()
        headers["x-hypnos-inference-ms"] = f"{inference_ms:.1f}"  # no JSON body to carry the telemetry
        if duration:
            headers["x-hypnos-audio-secs"] = f"{duration:.3f}"
            headers["x-hypnos-rtf"] = f"{inference_ms / 1000 / duration:.4f}"
        return Response(content=body, media_type=MEDIA_TYPES[fmt], headers=headers)
    language = job.language or result.language
    answer: dict[str, Any] = verbose(result, duration, language) if fmt == "verbose_json" else {"text": result.text}
    if job.language:
        answer["language"] = job.language
    if duration is not None:
        answer["duration_secs"] = duration
    answer["hypnos_telemetry"] = telemetry
    return json_response(answer, headers=headers)


def _speech_format(requested: str) -> tuple[str, str]:
    fmt = requested.lower()
    if fmt == "pcm":
        return "pcm", "audio/pcm"
    if fmt in WAV_FALLBACK_FORMATS:
        return "wav", "audio/wav"
    raise invalid_request(f"Invalid value for `response_format`: `{requested}` (wav or pcm)")


def _tier_headers(lease: Lease) -> dict[str, str]:
    return {
        "x-hypnos-previous-tier": str(lease.previous_tier),
        "x-hypnos-gpu-layers": str(lease.placement.gpu_layers),
        "x-hypnos-switch-ms": f"{lease.tier_switch_latency_ms:.1f}",
        **wait_headers(lease),
    }


@post("/v1/audio/speech", guards=[ready_guard], status_code=200)
async def speech(request: Request[Any, Any, Any]) -> Response[Any]:
    """Synthesize speech: WAV (16-bit mono 24 kHz) or raw PCM, whole or streamed as it is made."""
    state = hypnos_state(request)
    context = request_context(request)
    body = await decode_json(request, SpeechRequest)
    context.record.model = body.model
    context.record.stream = body.stream
    if not body.input.strip():
        raise invalid_request("`input` must not be empty")
    if len(body.input) > state.settings.limits.max_prompt_chars:
        raise invalid_request(f"The input holds {len(body.input)} characters, above limits.max_prompt_chars")
    if not 0.25 <= body.speed <= 4.0:
        raise invalid_request("Invalid value for `speed`: expected a number between 0.25 and 4.0")
    fmt, media_type = _speech_format(body.response_format)

    speaker = state.scheduler.serving(body.model, Modality.TEXT_TO_SPEECH).engine  # its voices, loaded or not
    voice = pick_voice(body.voice, speaker.capabilities() if speaker is not None else EngineCapabilities())
    job = SpeechInput(text=body.input, voice=voice, speed=body.speed, language=body.language)
    run = InferenceRun(request, body.model, [Modality.TEXT_TO_SPEECH])
    lease = await run.open(stream=("speak", job))  # on a Ray cluster the node starts speaking with the lease
    if body.stream:
        chunks = run.stream(lambda _lease: _speech_stream(run, job, fmt))
        return Stream(chunks, media_type=media_type, headers=_tier_headers(lease))
    try:
        pieces = await run.call(lambda engine: _collect(engine.speak(job, run.lease.cancel)))
        headers = _tier_headers(run.lease)
        rate = pieces[0].sample_rate if pieces else 24000
        pcm = b"".join(piece.pcm16 for piece in pieces)
        audio_secs = len(pcm) / 2 / rate
        inference_ms = run.inference_ms
        rtf = round(inference_ms / 1000 / audio_secs, 4) if audio_secs else None  # observability: /metrics tts rtf
        run.telemetry(EngineTiming(audio_secs=round(audio_secs, 3), rtf=rtf))
    finally:
        await run.close()
    headers["x-hypnos-inference-ms"] = f"{inference_ms:.1f}"
    headers["x-hypnos-audio-secs"] = f"{audio_secs:.3f}"
    headers["x-hypnos-rtf"] = f"{(inference_ms / 1000 / audio_secs) if audio_secs else 0.0:.4f}"
    content = pcm if fmt == "pcm" else wav_header(len(pcm), rate) + pcm
    return Response(content=content, media_type=media_type, headers=headers)


async def _collect(chunks: AsyncIterator[AudioChunk]) -> list[AudioChunk]:
    return [chunk async for chunk in chunks]


async def _speech_stream(run: InferenceRun, job: SpeechInput, fmt: str) -> AsyncIterator[bytes]:
    first = True
    started, ttfa_ms, samples, rate = time.perf_counter(), None, 0, 24000  # observability: time to first audio, rtf
    try:
        async for chunk in run.engine.speak(job, run.lease.cancel):
            ttfa_ms = (time.perf_counter() - started) * 1000 if ttfa_ms is None else ttfa_ms
            samples, rate = samples + len(chunk.pcm16) // 2, chunk.sample_rate
            if first and fmt == "wav":
                first = False
                yield wav_header(None, chunk.sample_rate) + chunk.pcm16
            else:
                yield chunk.pcm16
    except Exception as error:  # the headers are out: the connection is aborted, no clean end (section 10)
        logger.error("speech stream on %s failed", run.model, exc_info=error)
        run.record.error = f"{type(error).__name__}: {error}"
        run.record.error_type = getattr(error, "type", "server_error")
        raise  # the body ends without its chunked terminator: a client tells truncated audio from a whole answer
    finally:
        if ttfa_ms is not None:  # observability
            elapsed = (time.perf_counter() - started) * 1000
            rtf = elapsed / 1000 / (samples / rate) if samples else None
            run.telemetry(EngineTiming(ttfa_ms=round(ttfa_ms, 3), rtf=rtf))


ROUTES = [transcriptions, speech]
