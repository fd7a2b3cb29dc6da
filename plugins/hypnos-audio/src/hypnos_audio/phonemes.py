"""Text to Kokoro input: phrases, espeak-ng phonemes, token ids, and phoneme batches the model accepts."""

from __future__ import annotations

import re
from typing import Any

from hypnos.engine import missing_library

# Kokoro's context is 512 tokens, two of which are the boundary pads.
MAX_PHONEMES = 510
# A phrase ends at sentence punctuation followed by space, or at a line break.
_PHRASE_END = re.compile("(?<=[.!?;:\u3002\uff01\uff1f\u2026])\\s+|\n+")
_CLAUSE_END = re.compile("(?<=[,\u3001\uff0c])\\s+")
# Phrases longer than this many characters are cut at commas first, so early audio is not held back by one long one.
_LONG_PHRASE_CHARS = 300


def split_phrases(text: str) -> list[str]:
    """The phrases of text, in order: sentences, long ones cut at commas; empty pieces dropped."""
    phrases: list[str] = []
    for sentence in _PHRASE_END.split(text):
        sentence = " ".join(sentence.split())
        if not sentence:
            continue
        if len(sentence) <= _LONG_PHRASE_CHARS:
            phrases.append(sentence)
            continue
        current = ""
        for clause in _CLAUSE_END.split(sentence):
            if current and len(current) + len(clause) + 1 > _LONG_PHRASE_CHARS:
                phrases.append(current)
                current = clause
            else:
                current = f"{current} {clause}".strip()
        if current:
            phrases.append(current)
    return phrases


def group_phrases(phrases: list[str], max_chars: int = 400, growth: float = 2.0) -> list[str]:
    """Phrases joined into synthesis chunks: the first phrase alone (early first audio), then chunks that grow by
    `growth` up to max_chars, so fewer model runs carry the rest; max_chars <= 0 keeps one phrase per chunk."""
    if max_chars <= 0 or len(phrases) < 2:
        return list(phrases)
    chunks, budget = [phrases[0]], float(len(phrases[0]))
    current: list[str] = []
    for phrase in phrases[1:]:
        size = sum(len(p) for p in current)
        if current and size + len(phrase) > min(max_chars, budget * growth):
            chunks.append(" ".join(current))
            budget, current = float(size), []
        current.append(phrase)
    if current:
        chunks.append(" ".join(current))
    return chunks


def split_phonemes(phonemes: str, limit: int = MAX_PHONEMES) -> list[str]:
    """Cut a phoneme string into pieces of at most limit, at punctuation when possible, else at spaces."""
    if len(phonemes) <= limit:
        return [phonemes] if phonemes.strip() else []
    pieces: list[str] = []
    rest = phonemes
    while len(rest) > limit:
        window = rest[:limit]
        cut = max(window.rfind(mark) for mark in ".!?;:,")
        if cut <= 0:
            cut = window.rfind(" ")
        cut = cut + 1 if cut > 0 else limit
        pieces.append(rest[:cut].strip())
        rest = rest[cut:]
    if rest.strip():
        pieces.append(rest.strip())
    return [piece for piece in pieces if piece]


class EspeakPhonemizer:
    """espeak-ng through phonemizer, one backend (its own copy of the library) per engine, used from one thread."""

    def __init__(self, language: str) -> None:
        try:
            import espeakng_loader
            from phonemizer.backend import EspeakBackend
            from phonemizer.backend.espeak.wrapper import EspeakWrapper
        except ImportError as error:
            raise missing_library("phonemizer and espeakng-loader", "hypnos-audio[cpu]") from error
        EspeakWrapper.set_library(espeakng_loader.get_library_path())
        EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
        self.language = language
        self._backend: Any = EspeakBackend(language, preserve_punctuation=True, with_stress=True)

    def __call__(self, text: str) -> str:
        """The IPA phonemes of text, punctuation kept, whitespace collapsed."""
        phonemes = self._backend.phonemize([text], strip=False)[0]
        return " ".join(phonemes.split())


def tokenize(phonemes: str, vocab: dict[str, int]) -> list[int]:
    """Token ids of the phonemes the vocabulary knows; the others are dropped."""
    return [vocab[p] for p in phonemes if p in vocab]
