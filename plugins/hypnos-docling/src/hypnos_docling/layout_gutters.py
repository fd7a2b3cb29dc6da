"""Table columns set closer than a word space is wide: words that open a column are found by alignment.

A table made to fit its widest cells leaves only its cell padding (4-6 pt) between `February` and `3.8`, less than
the gap that ends a segment; joined, `February 3.8` merges two columns and the header row reads as one line. A
person sees the column: in three or more rows running one after another, a word starts at the same x (or ends there,
for right-aligned numbers) after a gap, and the gaps before it share a clear strip. Such a word opens a segment.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from typing import Protocol


class Line(Protocol):
    """A word as laid out on the page (layout_lines.Line)."""

    left: float
    right: float

    @property
    def height(self) -> float:
        """Its font size."""
        ...


RUN = 3  # rows in a row that show the column
ALIGN = 0.6  # points of slack in the alignment
STRIP = 2.0  # the width of the clear strip the gaps share
MIN_GAP = 0.25  # a gap narrower than this many font sizes is inside a word
FEW = 3  # a row with this many gaps or fewer is cells, not a line of running text
WIDER = 1.2  # in a row of more gaps, a column's gap is this much wider than the row's usual gap


def _gaps(row: Sequence[Line]) -> list[tuple[float, float, Line, bool]]:
    """(gap start, gap end, word after it, whether that word ends the row) for each gap of the row that can part two
    columns: in a row of few gaps any, else one wider than the row's usual gap (a justified line's gaps are all
    alike, so a chance river through a paragraph parts nothing)."""
    gaps = []
    for before, word in itertools.pairwise(row):
        if word.left - before.right >= MIN_GAP * min(word.height, before.height):
            gaps.append((before.right, word.left, word, word is row[-1]))
    if len(gaps) <= FEW:
        return gaps
    usual = statistics.median(end - start for start, end, _, _ in gaps)
    return [gap for gap in gaps if gap[1] - gap[0] > WIDER * usual]


def column_openers(rows: Sequence[Sequence[Line]]) -> set[int]:
    """ids of the words that open a table column: after a gap, aligned (left edges, or right edges of words that do
    not end their row) with such words in RUN consecutive rows whose gaps share a clear strip of STRIP points."""
    keyed: dict[tuple[str, int], list[tuple[int, float, float, Line]]] = {}
    for index, row in enumerate(rows):
        for start, end, word, last in _gaps(row):
            keyed.setdefault(("left", round(word.left / ALIGN)), []).append((index, start, end, word))
            if not last:
                keyed.setdefault(("right", round(word.right / ALIGN)), []).append((index, start, end, word))
    openers: set[int] = set()
    for (side, key), found in keyed.items():
        nearby = found + keyed.get((side, key + 1), [])  # an edge rounded to the next point is the same edge
        nearby.sort(key=lambda item: item[0])
        run: list[tuple[int, float, float, Line]] = []
        for item in nearby:
            if run and (item[0] == run[-1][0]):
                continue
            if run and item[0] != run[-1][0] + 1:
                _take(run, openers)
                run = []
            run.append(item)
        _take(run, openers)
    return openers


def _take(run: list[tuple[int, float, float, Line]], openers: set[int]) -> None:
    if len(run) < RUN:
        return
    if min(end for _, _, end, _ in run) - max(start for _, start, _, _ in run) >= STRIP:
        openers.update(id(word) for _, _, _, word in run)
