"""Text normalization and word error rate: how close a transcript is to the text that was spoken (speech tests)."""

from __future__ import annotations

import re
from collections.abc import Sequence

_NUMBERS = {
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}


def normalize_words(text: str) -> list[str]:
    """Lower-case words without punctuation, small number words as digits."""
    words = re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()
    return [_NUMBERS.get(word, word) for word in words]


def _edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    row = list(range(len(hypothesis) + 1))
    for i, item in enumerate(reference, start=1):
        previous, row[0] = row[0], i
        for j, other in enumerate(hypothesis, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (item != other))
    return row[len(hypothesis)]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over normalized words, divided by the reference length."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    return _edit_distance(ref, hyp) / max(1, len(ref))


def character_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over the normalized words' letters (spaces dropped), divided by the reference length.

    For short texts, where one misheard word is a large share of the words ("foxtrot" heard as "fox strat" is a
    quarter of an eight-word answer, two letters of forty-one)."""
    ref, hyp = "".join(normalize_words(reference)), "".join(normalize_words(hypothesis))
    return _edit_distance(ref, hyp) / max(1, len(ref))
