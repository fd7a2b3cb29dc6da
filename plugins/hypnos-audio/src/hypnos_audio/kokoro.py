"""Speech out: Kokoro-82M (ONNX) on ONNX Runtime, phrase by phrase on the model's own worker thread."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from concurrent.futures import Future
from pathlib import Path
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
)
from hypnos.errors import clip, invalid_request, server_error
from hypnos.kit.audio import to_pcm16
from hypnos.kit.device_oom import out_of_memory
from hypnos.kit.staged import ModelNotLoaded
from hypnos.types import LayerPlacementPlan

from hypnos_audio.onnx_voice import OnnxVoiceEngine
from hypnos_audio.options import KokoroOptions
from hypnos_audio.phonemes import EspeakPhonemizer, group_phrases, split_phonemes, split_phrases, tokenize
from hypnos_audio.voice_aliases import openai_voice_aliases

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
# Kokoro voice ids start with their language's letter (af_heart: American English, jf_alpha: Japanese)
KOKORO_LANGUAGES = {
    "a": "en-US",
    "b": "en-GB",
    "e": "es",
    "f": "fr",
    "h": "hi",
    "i": "it",
    "j": "ja",
    "p": "pt-BR",
    "z": "zh",
}
MAX_FALLBACKS_LOGGED = 64  # distinct missing voice names that still get a warning


def trim_silence(audio: np.ndarray, top_db: float = 60.0, frame: int = 2048, hop: int = 512) -> np.ndarray:
    """Cut leading and trailing frames quieter than top_db below the loudest frame (as librosa's trim does)."""
    if audio.size == 0:
        return audio
    padded = np.pad(audio, frame // 2)
    count = 1 + (len(padded) - frame) // hop
    windows = np.lib.stride_tricks.as_strided(padded, (count, frame), (padded.strides[0] * hop, padded.strides[0]))
    power = np.mean(windows.astype(np.float64) ** 2, axis=1)
    reference = power.max()
    if reference <= 0:
        return audio
    loud = np.nonzero(10 * np.log10(np.maximum(power, 1e-10) / reference) > -top_db)[0]
    if loud.size == 0:
        return audio[:0]
    return audio[loud[0] * hop : min(len(audio), (loud[-1] + 1) * hop)]


def load_vocab(path: Path) -> dict[str, int]:
    """Kokoro's phoneme vocabulary from a vocab.json / config.json (`{"vocab": {...}}`) or a plain mapping."""
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = data.get("vocab", data) if isinstance(data, dict) else None
    if not isinstance(vocab, dict) or not vocab:
        raise EngineUnavailable(f"{path} holds no Kokoro vocabulary")
    return {str(k): int(v) for k, v in vocab.items()}


def load_voices(path: Path) -> dict[str, np.ndarray]:
    """The voice pack (an .npz of style tables), in the file's order."""
    with np.load(path) as pack:
        return {name: np.asarray(pack[name], dtype=np.float32) for name in pack.files}


class KokoroEngine(OnnxVoiceEngine):
    """Kokoro-82M: tier 1 = ONNX Runtime session created; tier 2 = model bytes and voices in RAM; tier 3 = nothing."""

    options_table = "kokoro"
    options_type = KokoroOptions
    label = "kokoro"

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context, beside=lambda weights: weights.parent / "vocab.json")
        self.options: KokoroOptions
        self.voices_file = self.model_path("voices_path")
        self.vocab_file = self.companion_file
        self.chunks_synthesized = 0
        self._voices: dict[str, np.ndarray] | None = None
        self._voice_names: list[str] | None = None
        self._vocab: dict[str, int] | None = None
        self._token_input = "tokens"
        self._phonemize: EspeakPhonemizer | None = None
        self._fallbacks_logged: set[str] = set()

    # ---- lifecycle ----------------------------------------------------------------------------------------------

    def held_files(self) -> list[Path]:
        """The voice pack."""
        return [self.voices_file]

    def read_weights(self) -> None:
        """Tier 2: the ONNX bytes and the voice pack in RAM."""
        super().read_weights()
        if self._voices is None:
            self._voices = load_voices(self.voices_file)
            if not self._voices:
                raise EngineUnavailable(f"the voice pack {self.voices_file} holds no voices")

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 1: the vocabulary, the phonemizer and the ONNX Runtime sessions (the first warmed up when
        configured)."""
        assert self._voices is not None
        self._vocab = load_vocab(self.vocab_file)
        self._phonemize = EspeakPhonemizer(self.options.espeak_language)
        session = self.open_sessions(lambda made: made).session(self.core_threads, self.core_alone)
        inputs = {item.name for item in session.get_inputs()}
        self._token_input = "input_ids" if "input_ids" in inputs else "tokens"
        if self.options.warmup:
            self._infer_phonemes(session, "ə", next(iter(self._voices)), 1.0)

    def release_device(self) -> None:
        """Drop the sessions and the phonemizer."""
        super().release_device()
        self._phonemize = None

    def release_warm(self) -> None:
        """Drop the model bytes and the voices."""
        super().release_warm()
        self._voices = None

    def capabilities(self) -> EngineCapabilities:
        """The voice pack's voice names (read from the pack's index, without loading it), OpenAI's names as aliases."""
        if self._voice_names is None:
            try:
                with np.load(self.voices_file) as pack:
                    self._voice_names = list(pack.files)
            except (OSError, ValueError):
                return EngineCapabilities(voices=[])
        languages = {name: KOKORO_LANGUAGES[name[0]] for name in self._voice_names if name[:1] in KOKORO_LANGUAGES}
        names = list(self._voice_names)
        aliases = openai_voice_aliases(names)
        return EngineCapabilities(voices=names, voice_languages=languages or None, voice_aliases=aliases or None)

    # ---- speech -------------------------------------------------------------------------------------------------

    def voices(self) -> list[str]:
        """The voice pack's voice names, in file order (empty below tier 2)."""
        return list(self._voices or {})

    def pick_voice(self, requested: str) -> str:
        """The requested voice when the pack has it, else the pack's first voice (logged: a warning once per voice)."""
        if not self._voices:
            raise ModelNotLoaded(self.model.id)
        if requested in self._voices:
            return requested
        fallback = next(iter(self._voices))
        # a warning the first time per voice, then debug lines, so a pack without OpenAI voices does not flood the log
        # (at most MAX_FALLBACKS_LOGGED names are remembered: past that every miss is a debug line)
        first = requested not in self._fallbacks_logged and len(self._fallbacks_logged) < MAX_FALLBACKS_LOGGED
        if first:
            self._fallbacks_logged.add(requested)
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "model %s: the voice pack %s has no voice `%s`; using its first voice `%s`",
            self.model.id,
            self.voices_file.name,
            clip(requested, 64),
            fallback,
        )
        return fallback

    async def speak(self, speech: SpeechInput, cancel: CancelToken) -> AsyncGenerator[AudioChunk, None]:
        """One AudioChunk per phrase chunk, each yielded as soon as it is synthesized; the next runs meanwhile."""
        self.require_ready()
        voice = self.pick_voice(speech.voice)
        speed = min(max(speech.speed, self.options.min_speed), self.options.max_speed)
        phrases = group_phrases(split_phrases(speech.text), self.options.chunk_max_chars)
        if not phrases:
            raise invalid_request("`input` has nothing to speak")
        pause = np.zeros(SAMPLE_RATE * self.options.phrase_pause_ms // 1000, dtype="<i2").tobytes()
        pending: asyncio.Future[np.ndarray] | None = None
        produced = 0
        try:
            submitted = pending = self.worker.submit(self._synthesize, phrases[0], voice, speed, cancel)
            for index in range(len(phrases)):
                audio = await submitted
                pending = None
                if cancel.cancelled:
                    return
                if index + 1 < len(phrases):
                    submitted = pending = self.worker.submit(self._synthesize, phrases[index + 1], voice, speed, cancel)
                if audio.size == 0:
                    continue
                pcm = to_pcm16(audio)
                yield AudioChunk(pcm16=pause + pcm if produced else pcm, sample_rate=SAMPLE_RATE)
                produced += 1
        finally:
            if pending is not None:
                pending.add_done_callback(_ignore_result)
        if not produced:
            raise invalid_request("`input` has nothing Kokoro can pronounce")

    def _synthesize(self, phrase: str, voice: str, speed: float, cancel: CancelToken) -> np.ndarray:
        """One phrase to float audio (worker thread): phonemes, batches of <= 510, inference, trimmed silence."""
        sessions = self.thread_sessions
        if cancel.cancelled or sessions is None or self._phonemize is None or self._vocab is None:
            return np.zeros(0, dtype=np.float32)
        session = sessions.session(self.core_threads, self.core_alone)  # the one for the core share now
        vocab = self._vocab
        phonemes = "".join(p for p in self._phonemize(phrase) if p in vocab)
        parts = [self._infer_phonemes(session, piece, voice, speed) for piece in split_phonemes(phonemes)]
        self.chunks_synthesized += 1
        parts = [part for part in parts if part.size]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def _infer_phonemes(self, session: Any, phonemes: str, voice: str, speed: float) -> np.ndarray:
        assert self._vocab is not None and self._voices is not None
        tokens = tokenize(phonemes, self._vocab)
        if not tokens:
            return np.zeros(0, dtype=np.float32)
        table = self._voices[voice]
        style = table[min(len(tokens), len(table)) - 1].reshape(1, -1)
        try:
            outputs = session.run(
                None,
                {
                    self._token_input: np.array([[0, *tokens, 0]], dtype=np.int64),
                    "style": style.astype(np.float32),
                    "speed": np.array([speed], dtype=np.float32),
                },
            )
        except Exception as error:
            if self.device_oom(error):  # ONNX Runtime could not allocate: 507, idle models evicted and retried
                raise out_of_memory(self.model.id, error) from error
            logger.exception("Kokoro inference failed on %s", self.model.id)
            raise server_error(f"Kokoro inference failed on `{self.model.id}`; the server log has the cause") from error
        return trim_silence(np.asarray(outputs[0], dtype=np.float32).ravel())


def _ignore_result(future: asyncio.Future[Any] | Future[Any]) -> None:
    """Retrieve an abandoned phrase's outcome so its exception is not reported as never retrieved."""
    if not future.cancelled():
        future.exception()
