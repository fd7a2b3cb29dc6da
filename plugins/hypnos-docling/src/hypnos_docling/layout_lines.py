"""Text segments and rows of a page: words on one baseline joined while the gap between them is a word space.

A segment is what a reader sees as one run of text (a cell of a table, a line of a paragraph, a list marker); a row
is the segments sharing a baseline in one column of the page. Fonts are told apart by their key: the body font is
the one carrying most characters, monospace fonts by their name or their constant advance per character.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from hypnos_docling.layout_gutters import column_openers

_MONO_NAME = re.compile(
    r"mono|courier|consol|code|typewriter|cmtt|menlo|nimbusmon|lmtt|sftt|cousine|andale|lettergothic|fixed",
    re.IGNORECASE,
)
_BOLD_NAME = re.compile(r"bold|black|heavy|semibold|demi|cmbx|cmb\d|lmroman\d+-bold", re.IGNORECASE)
_ITALIC_NAME = re.compile(r"italic|oblique|obli\b|cmti\d|cmsl\d|slanted", re.IGNORECASE)
WORD_GAP = 0.8  # a gap wider than this many font sizes ends a segment (a monospace space is 0.6)


@dataclass
class Line:
    """A text run in top-left page coordinates (points), with its font key ("" when unknown, e.g. OCR)."""

    text: str
    left: float
    top: float
    right: float
    bottom: float
    font: str = ""
    size: float = 0.0  # the font size as calibrate() estimates it; the box height until then
    pitch: float = 0.0  # the advance per character when its three or more words are set on a fixed pitch, else 0
    faces: dict[str, int] = field(default_factory=dict)  # characters per font key when its words mix fonts

    @property
    def height(self) -> float:
        """The run's font size: calibrated, else its box height."""
        return self.size or max(self.bottom - self.top, 0.1)


def calibrate(words: list[Line]) -> None:
    """Set each run's size from its box height, scaled per font so that it matches the font's advance per character
    (PDF writers give boxes from the baseline to the x-height or from the font's whole bounding box alike)."""
    ratios: dict[str, list[float]] = {}
    for word in words:
        text = word.text.strip()
        if len(text) >= 4 and word.bottom > word.top:
            ratios.setdefault(word.font, []).append(
                2.0 * (word.right - word.left) / len(text) / (word.bottom - word.top)
            )
    scale = {font: sorted(values)[len(values) // 2] for font, values in ratios.items() if len(values) >= 3}
    every = [ratio for values in ratios.values() for ratio in values]
    fallback = sorted(every)[len(every) // 2] if len(every) >= 3 else 1.0
    for word in words:
        word.size = max(word.bottom - word.top, 0.1) * scale.get(word.font, fallback)


def pitch(above: list[Line], below: list[Line]) -> float:
    """The distance between two rows' baselines (their runs' lowest bottoms)."""
    return max(line.bottom for line in below) - max(line.bottom for line in above)


@dataclass
class Fonts:
    """What the page's fonts look like: the body font and height, the monospace and bold keys."""

    body: str
    body_height: float
    mono: set[str]
    bold: set[str]


def fonts_of(lines: list[Line]) -> Fonts:
    """The body font (most characters outside monospace faces), its typical height, and which fonts are monospace
    (by name, constant advance or fixed pitch) or bold (by name)."""
    chars: dict[str, int] = {}
    advances: dict[str, list[float]] = {}
    lengths: dict[str, set[int]] = {}
    for line in lines:
        for key, count in (line.faces or {line.font: len(line.text)}).items():
            chars[key] = chars.get(key, 0) + count
        if len(line.text) >= 4 and len(line.faces) <= 1:
            advances.setdefault(line.font, []).append((line.right - line.left) / len(line.text))
            lengths.setdefault(line.font, set()).add(len(line.text))
    mono = {key for key in chars if key and _MONO_NAME.search(key)}
    pitched: dict[str, int] = {}
    spaced: dict[str, int] = {}
    for line in lines:
        if line.text.count(" ") >= 2:
            spaced[line.font] = spaced.get(line.font, 0) + 1
            pitched[line.font] = pitched.get(line.font, 0) + (line.pitch > 0)
    mono |= {key for key, count in pitched.items() if key and count and 2 * count >= spaced[key]}
    proportional = {key: count for key, count in chars.items() if key not in mono} or chars
    body = max(proportional, key=lambda key: proportional[key]) if proportional else ""
    for key, values in advances.items():  # a constant advance over runs of different lengths (not `Name 1`, `Size 2`;
        # short ones among them: long headings alike, `Release 0.3.11`, `Release 0.3.12`, share an advance by chance)
        if key != body and len(values) >= 4 and _spread(values) < 0.02 and len(lengths[key]) >= 3:
            if min(lengths[key]) > 8:
                continue
            mono.add(key)
    body_lines = [line for line in lines if line.font == body] or lines
    body_height = _weighted_median([(line.height, len(line.text)) for line in body_lines]) if body_lines else 10.0
    bold = {key for key in chars if _BOLD_NAME.search(key)}
    return Fonts(body=body, body_height=body_height, mono=mono, bold=bold)


def is_italic(font: str) -> bool:
    """Whether the font's name says it slants (`Times-Italic`, `NimbusSanL-ReguObli`, TeX's `CMTI10`)."""
    return _ITALIC_NAME.search(font) is not None


def mono_share(row: list[Line], mono: set[str]) -> float:
    """The share of the row's letters and digits set in a monospace face (of its runs when it has none: `}`)."""
    total = hits = 0
    for line in row:
        for key, count in (line.faces or {line.font: _letters(line.text)}).items():
            total += count
            hits += count if key in mono else 0
    if not total:
        return sum(line.font in mono for line in row) / len(row) if row else 0.0
    return hits / total


def _spread(values: list[float]) -> float:
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else 1.0


def _weighted_median(pairs: list[tuple[float, int]]) -> float:
    pairs = sorted(pairs)
    half, seen = sum(weight for _, weight in pairs) / 2, 0
    for value, weight in pairs:
        seen += weight
        if seen >= half:
            return value
    return pairs[-1][0] if pairs else 10.0


def _letters(text: str) -> int:
    """How many letters and digits the text has (dot leaders and rules weigh nothing in telling its face)."""
    return len(text) if text.isalnum() else sum(ch.isalnum() for ch in text)


def _advance(word: Line) -> float:
    return (word.right - word.left) / max(len(word.text), 1)


def _fixed_space(before: Line, word: Line) -> bool:
    """The two words share one advance per character and the gap between them is one character of it."""
    if before.font != word.font:
        return False
    a, b = _advance(before), _advance(word)
    return abs(a - b) <= 0.02 * max(a, b) and abs(word.left - before.right - a) <= 0.06 * a


def _joins(current: Line, previous: Line, word: Line) -> bool:
    gap = word.left - current.right
    return gap < WORD_GAP * min(word.height, current.height) or gap <= 1.06 * min(_advance(previous), _advance(word))


def segments_of_words(words: list[Line]) -> list[Line]:
    """Words joined into segments: same baseline, gap below WORD_GAP line heights or one character's advance (a
    monospace space where the font's size is misjudged), unless the word opens a table column (layout_gutters); a
    segment of 3+ words on a fixed pitch records it."""
    calibrate(words)
    segments: list[Line] = []
    rows = rows_of(words)
    openers = column_openers(rows)
    for row in rows:
        current = previous = None
        joins = fixed = 0
        sizes: dict[str, dict[float, int]] = {}
        for word in row:
            joins_here = current is not None and previous is not None and _joins(current, previous, word)
            if joins_here and id(word) not in openers:
                assert current is not None and previous is not None
                current.text += ("" if word.left - current.right < 0.05 * word.height else " ") + word.text
                current.right = max(current.right, word.right)
                current.top, current.bottom = min(current.top, word.top), max(current.bottom, word.bottom)
                joins, fixed = joins + 1, fixed + (fixed == joins and _fixed_space(previous, word))
                current.pitch = _advance(current) if joins >= 2 and fixed == joins else 0.0
                faces = current.faces
                faces[word.font] = faces.get(word.font, 0) + _letters(word.text)
                _count_size(sizes, word)
                if len(faces) > 1:
                    current.font = max(faces, key=lambda key: faces[key])  # the face of most of its characters
                # the size of most of its face's letters: an inline word in another face, or one whose box a raised
                # letter makes taller (TeX's LaTeX logo), does not resize the run
                counts = sizes[current.font]
                current.size = max(counts, key=lambda size: (counts[size], size))
                previous = word
                continue
            current = Line(word.text, word.left, word.top, word.right, word.bottom, word.font, word.size)
            current.faces = {word.font: _letters(word.text)}
            segments.append(current)
            previous, joins, fixed, sizes = word, 0, 0, {}
            _count_size(sizes, word)
    return segments


def _count_size(sizes: dict[str, dict[float, int]], word: Line) -> None:
    """Count the word's letters at its size, per face."""
    counts = sizes.setdefault(word.font, {})
    counts[word.size] = counts.get(word.size, 0) + max(_letters(word.text), 1)


def rows_of(lines: list[Line]) -> list[list[Line]]:
    """Runs grouped by baseline (vertical overlap), each row sorted left to right; rows top to bottom."""
    rows: list[list[Line]] = []
    anchor: Line | None = None  # the tallest run of the last row
    for line in sorted(lines, key=lambda item: (item.bottom, item.left)):
        height = line.height
        if anchor is not None:
            anchor_height = anchor.height
            if abs(line.bottom - anchor.bottom) < 0.3 * min(height, anchor_height):
                rows[-1].append(line)
                if height > anchor_height:
                    anchor = line
                continue
        rows.append([line])
        anchor = line
    rows.sort(key=lambda row: min(i.top for i in row))
    return [sorted(row, key=lambda item: item.left) for row in _raised_marks_joined(rows)]


def _raised_marks_joined(rows: list[list[Line]]) -> list[list[Line]]:
    """A row of small runs only, set within the box of the row below (a superscript: `Adobe®`, a footnote mark) or
    above (a subscript), joins that row: alone, it parted its line's words into the columns of a table."""
    joined: list[list[Line]] = []
    for index, row in enumerate(rows):
        small = max(line.height for line in row)
        below = rows[index + 1] if index + 1 < len(rows) else None
        if below is not None and small < 0.8 * max(line.height for line in below) and _beside(row, below):
            if max(line.bottom for line in row) > min(line.top for line in below) + 0.15 * small:
                below.extend(row)
                continue
        if joined and small < 0.8 * max(line.height for line in joined[-1]) and _beside(row, joined[-1]):
            if min(line.top for line in row) < max(line.bottom for line in joined[-1]) - 0.15 * small:
                joined[-1].extend(row)
                continue
        joined.append(row)
    return joined


def _beside(marks: list[Line], row: list[Line]) -> bool:
    """Each mark sits right after or before a run of the row, over none of them (a line of code indented under
    another is no superscript of it)."""
    for mark in marks:
        if any(min(run.right, mark.right) - max(run.left, mark.left) > 0.5 for run in row):
            return False
        gaps = [max(mark.left - run.right, run.left - mark.right) for run in row]
        if min(gaps, default=1e9) > 1.5 * mark.height:
            return False
    return True


def column_split(lines: list[Line], width: float) -> float | None:
    """The x of a gutter between two text columns when the page has one (long runs keep to either side), else None."""
    long_runs = [line for line in lines if sum(ch.isalnum() for ch in line.text) >= 20]  # not a run of leader dots
    if len(long_runs) < 8:
        return None
    best: tuple[int, float] | None = None
    for step in range(30, 71, 2):
        x = width * step / 100
        crossing = sum(1 for line in long_runs if line.left < x - 2 and line.right > x + 2)
        left = sum(1 for line in long_runs if line.right <= x + 2)
        right = sum(1 for line in long_runs if line.left >= x - 2)
        if left >= 3 and right >= 3 and crossing <= 0.1 * len(long_runs):
            if best is None or crossing < best[0]:
                best = (crossing, x)
    return best[1] if best else None
