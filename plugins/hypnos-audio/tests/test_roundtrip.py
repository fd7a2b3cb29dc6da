"""Text -> Kokoro speech -> whisper transcript recovers the words (normalized WER <= 0.2)."""

from __future__ import annotations

import pytest
from hypnos.engine import CancelToken, SpeechInput, TranscriptionInput
from hypnos.kit.audio import wav_bytes
from hypnos.testing.speech_text import character_error_rate, normalize_words, word_error_rate
from hypnos_audio.kokoro import KokoroEngine
from hypnos_audio.whisper import WhisperEngine

pytestmark = pytest.mark.model

SENTENCES = [
    "Please bring the blue umbrella tomorrow morning.",
    "The train leaves the station at seven o'clock.",
    "We planted three apple trees in the garden last spring.",
    "Can you turn off the lights in the kitchen?",
]


def test_word_error_rate() -> None:
    assert word_error_rate("Hello, world!", "hello world") == 0.0
    assert word_error_rate("a b c d", "a x c") == 0.5
    assert normalize_words("Three-o'clock, SEVEN") == ["3", "o'clock", "7"]


def test_character_error_rate_counts_letters_not_words() -> None:
    assert character_error_rate("Alpha foxtrot.", "alpha fox trot") == 0.0
    assert character_error_rate("alpha foxtrot", "alpha fox strat") == 2 / 12
    assert character_error_rate("alpha foxtrot", "") == 1.0


async def test_round_trip_recovers_the_words(kokoro: KokoroEngine, whisper: WhisperEngine) -> None:
    text = " ".join(SENTENCES)
    pcm = b"".join([c.pcm16 async for c in kokoro.speak(SpeechInput(text=text, voice="jf_alpha"), CancelToken())])
    result = await whisper.transcribe(TranscriptionInput(audio=wav_bytes(pcm, 24000)), CancelToken())
    assert word_error_rate(text, result.text) <= 0.2, result.text
