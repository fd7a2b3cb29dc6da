"""Label families, overlapping word windows, and the one greedy span resolution GLiNER's decoder applies."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """Words [first, stop) of a text run in one pass; spans starting in [own_first, own_stop) belong to it."""

    first: int
    stop: int
    own_first: int
    own_stop: int

    def owns(self, start_word: int) -> bool:
        """True when a span starting at this text word index is this window's to report."""
        return self.own_first <= start_word < self.own_stop


@dataclass(frozen=True)
class Candidate:
    """A span in text character offsets [start, end) (Unicode scalar values) with its label and score."""

    start: int
    end: int
    label: str
    score: float


def unique_labels(labels: Iterable[str]) -> list[str]:
    """The labels without repeats, in first-seen order."""
    return list(dict.fromkeys(labels))


def label_families(labels: Sequence[str], per_pass: int) -> list[list[str]]:
    """Consecutive groups of at most `per_pass` labels; one group when they fit in one pass."""
    size = max(1, per_pass)
    return [list(labels[i : i + size]) for i in range(0, len(labels), size)]


def plan_windows(word_tokens: Sequence[int], max_words: int, max_tokens: int | None, overlap: int) -> list[Window]:
    """Overlapping windows over a text's words: each at most `max_words` words and `max_tokens` subword tokens
    (a window always takes at least one word), the next starting `overlap` words before the previous one ends.

    Ownership splits each overlap in the middle, so a span of up to overlap // 2 words that starts in a window's
    owned range lies whole inside that window: a span across a seam is reported once, by the window that holds it.
    """
    count = len(word_tokens)
    bounds: list[tuple[int, int]] = []
    first = 0
    while first < count:
        stop, tokens = first, 0
        while stop < count and stop - first < max_words:
            if max_tokens is not None and stop > first and tokens + word_tokens[stop] > max_tokens:
                break
            tokens += word_tokens[stop]
            stop += 1
        bounds.append((first, stop))
        if stop >= count:
            break
        first = max(first + 1, stop - overlap)
    windows: list[Window] = []
    for index, (first, stop) in enumerate(bounds):
        own_first = windows[-1].own_stop if windows else 0
        own_stop = count if index == len(bounds) - 1 else (bounds[index + 1][0] + stop) // 2
        windows.append(Window(first, stop, own_first, max(own_first, own_stop)))
    return windows


def _clash(start: int, end: int, other_start: int, other_end: int, flat: bool) -> bool:
    """GLiNER's has_overlapping (flat) / has_overlapping_nested (nested) with one label per span."""
    if start == other_start and end == other_end:
        return True
    if start >= other_end or other_start >= end:
        return False
    if flat:
        return True
    nested = (start <= other_start and end >= other_end) or (other_start <= start and other_end >= end)
    return not nested


def resolve(candidates: Sequence[Candidate], flat: bool) -> list[Candidate]:
    """GLiNER's greedy search: highest score first, drop a span that overlaps a kept one (flat: any overlap;
    nested: a partial overlap; the same span twice: always), then order by start.

    Kept spans are looked up by start, only those that can reach the candidate, so long texts stay fast.
    """
    kept: list[Candidate] = []
    bounds: list[tuple[int, int]] = []  # the kept spans' (start, end), sorted
    longest = 0
    for candidate in sorted(candidates, key=lambda c: -c.score):
        low = bisect.bisect_left(bounds, (candidate.start - longest, -1))
        high = bisect.bisect_left(bounds, (candidate.end, -1))
        if any(_clash(candidate.start, candidate.end, s, e, flat) for s, e in bounds[low:high]):
            continue
        kept.append(candidate)
        bisect.insort(bounds, (candidate.start, candidate.end))
        longest = max(longest, candidate.end - candidate.start)
    kept.sort(key=lambda c: c.start)
    return kept
