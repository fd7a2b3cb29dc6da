"""Speech out: a Piper voice (VITS ONNX + JSON config) on ONNX Runtime, by sentence, resampled to 24 kHz."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import numpy as np
from hypnos.config import ModelConfig
from hypnos.engine import (
    AudioChunk,
    CancelToken,
    EngineCapabilities,
    EngineContext,
    EngineUnavailable,
    SpeechInput,
    missing_library,
)
from hypnos.errors import invalid_request, server_error
from hypnos.kit.audio import resample, to_pcm16
from hypnos.kit.device_oom import out_of_memory
from hypnos.kit.staged import ModelNotLoaded
from hypnos.types import LayerPlacementPlan

from hypnos_audio.onnx_voice import OnnxVoiceEngine
from hypnos_audio.options import PiperOptions
from hypnos_audio.voice_aliases import openai_voice_aliases

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000  # what the speech route serves (section 10); Piper voices run at 16 or 22.05 kHz


class PiperEngine(OnnxVoiceEngine):
    """A Piper voice: tier 1 = ONNX Runtime session; tier 2 = model bytes and config in RAM; tier 3 = nothing."""

    options_table = "piper"
    options_type = PiperOptions
    label = "piper"

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context, beside=lambda weights: weights.with_name(weights.name + ".json"))
        self.options: PiperOptions
        self.config_file = self.companion_file
        self._config: dict[str, Any] | None = None
        self.sentences_synthesized = 0

    def _read_config(self) -> dict[str, Any]:
        if self._config is None:
            try:
                self._config = json.loads(self.config_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise EngineUnavailable(f"the model `{self.model.id}`: no Piper config: {error}") from error
        return self._config

    def read_weights(self) -> None:
        """Tier 2: the ONNX bytes and the voice config in RAM."""
        self._read_config()
        super().read_weights()

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 1: the ONNX Runtime sessions, each wrapped in piper's PiperVoice (its bundled espeak-ng phonemizes)."""
        try:
            from piper import PiperVoice
            from piper.config import PiperConfig
        except ImportError as error:
            raise missing_library("piper-tts", "hypnos-audio[piper]") from error
        config = PiperConfig.from_dict(self._read_config())
        self.open_sessions(lambda session: PiperVoice(config=config, session=session))

    def capabilities(self) -> EngineCapabilities:
        """The voice's speakers (a multi-speaker voice) or the voice itself, named after its file; OpenAI's voice names
        as aliases of them."""
        try:
            config = self._read_config()
        except EngineUnavailable:
            return EngineCapabilities(voices=[])
        voices = list(config.get("speaker_id_map") or {}) or [self.weights_file.name.removesuffix(".onnx")]
        code = (config.get("language") or {}).get("code") if isinstance(config.get("language"), dict) else None
        languages = {voice: str(code).replace("_", "-") for voice in voices} if code else None
        aliases = openai_voice_aliases(voices)
        return EngineCapabilities(voices=voices, voice_languages=languages, voice_aliases=aliases or None)

    async def speak(self, speech: SpeechInput, cancel: CancelToken) -> AsyncGenerator[AudioChunk, None]:
        """One AudioChunk per sentence as soon as Piper has it (16-bit mono 24 kHz), the next one synthesized after
        it is handed out; sentences after the first led by a pause."""
        self.require_ready()
        sentences = await self.run_blocking(self._sentences, speech)
        pause = np.zeros(SAMPLE_RATE * self.options.phrase_pause_ms // 1000, dtype="<i2").tobytes()
        produced = 0
        while not cancel.cancelled:
            audio = await self.run_blocking(self._next_sentence, sentences)
            if audio is None:
                break
            if not audio.size:
                continue
            pcm = to_pcm16(audio)
            yield AudioChunk(pcm16=pause + pcm if produced else pcm, sample_rate=SAMPLE_RATE)
            produced += 1
        if not produced and not cancel.cancelled:
            raise invalid_request("`input` has nothing Piper can pronounce")

    def _sentences(self, speech: SpeechInput) -> Iterator[Any]:
        """Piper's sentence-by-sentence synthesis of the input, not started yet (worker thread)."""
        sessions = self.thread_sessions
        if sessions is None:
            raise ModelNotLoaded(self.model.id)
        voice = sessions.session(self.core_threads, self.core_alone)  # the one for the core share now
        from piper.config import SynthesisConfig

        speakers = self._read_config().get("speaker_id_map") or {}
        speed = min(max(speech.speed, self.options.min_speed), self.options.max_speed)
        config = SynthesisConfig(
            speaker_id=speakers.get(speech.voice),
            length_scale=voice.config.length_scale / speed,
            noise_scale=self.options.noise_scale,
            noise_w_scale=self.options.noise_w_scale,
        )
        return iter(voice.synthesize(speech.text, syn_config=config))

    def _next_sentence(self, sentences: Iterator[Any]) -> np.ndarray | None:
        """The next sentence as float audio at 24 kHz, None after the last (worker thread)."""
        try:
            chunk = next(sentences, None)
        except Exception as error:
            if self.device_oom(error):  # ONNX Runtime could not allocate: 507, idle models evicted and retried
                raise out_of_memory(self.model.id, error) from error
            logger.exception("Piper inference failed on %s", self.model.id)
            raise server_error(f"Piper inference failed on `{self.model.id}`; the server log has the cause") from error
        if chunk is None:
            return None
        self.sentences_synthesized += 1
        return resample(np.asarray(chunk.audio_float_array, dtype=np.float32).ravel(), chunk.sample_rate, SAMPLE_RATE)
