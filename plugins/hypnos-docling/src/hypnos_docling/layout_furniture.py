"""Running headers, footers and page numbers: short runs in a page's top or bottom band that are a page number or
repeat (digits aside) in the same band of another page of the document.

Pages are parsed in any order and handed out in order; a page's furniture is decided when it is handed out, against
every page parsed by then, so a header first seen on page 1 is known once page 2 is parsed.
"""

from __future__ import annotations

import re
import statistics
import threading
from dataclasses import dataclass, field

from hypnos_docling.layout_lines import Line

BAND = 0.1  # the top and bottom tenth of the page
SEPARATION = 0.8  # the blank (in line heights) between a running header or footer and the text
HEADING_RATIO = 1.25  # a band run this much larger than the page's body text is a heading, not a running header
_PAGE_NUMBER = re.compile(
    r"^(?:[-\u2013\u2014]\s*)?(?:page\s+|p\.\s*)?(?:\d{1,4}|[ivxlc]{1,6})(?:\s*(?:/|of)\s*\d{1,4})?(?:\s*[-\u2013\u2014])?$",
    re.IGNORECASE,
)


def is_page_number(text: str) -> bool:
    """`12`, `- 12 -`, `Page 3`, `3 / 17`, `Page 3 of 17`, `xii`."""
    return bool(_PAGE_NUMBER.match(text.strip()))


def shape(text: str) -> str:
    """The text with digits and whitespace folded, so that `Chapter 2 - page 14` matches `Chapter 2 - page 15`."""
    folded = re.sub(r"\d+", "#", " ".join(text.split()).casefold())
    return re.sub(r"(^|\s)[ivxlc]{1,6}$", r"\1#", folded)  # a front matter page's number: `Publishing iii`


@dataclass
class PageBands:
    """The runs of one page lying in its top and bottom bands."""

    top: list[Line]
    bottom: list[Line]
    body_size: float = 0.0  # the page's median run size (0 when the page has no runs)
    apart: list[Line] = field(default_factory=list)  # the outermost rows' runs when a blank parts them from the text

    def heading_sized(self, line: Line) -> bool:
        """True when the run is set markedly larger than the page's body text (`Chapter 2: Results` at 20 pt)."""
        return self.body_size > 0 and line.height > HEADING_RATIO * self.body_size


def _outer_row(lines: list[Line], edge: float, sign: float) -> list[Line]:
    """The row nearest the page's edge (`sign` 1 from the top, -1 from the bottom) when a blank line or more parts
    it from the rest of the page, else nothing: a running header or footer stands apart from the text."""
    if not lines:
        return []
    outer = min(lines, key=lambda line: sign * line.top if sign > 0 else -line.bottom)
    row = [line for line in lines if abs(line.bottom - outer.bottom) < 0.5 * line.height]
    rest = [line for line in lines if not any(line is mine for mine in row)]
    if not rest:
        return row
    height = max(line.height for line in row)
    if sign > 0:
        gap = min(line.top for line in rest) - max(line.bottom for line in row)
    else:
        gap = min(line.top for line in row) - max(line.bottom for line in rest)
    return row if gap >= SEPARATION * height else []


def bands_of(lines: list[Line], height: float) -> PageBands:
    """The short runs of the page within BAND of its top or bottom edge (the candidates for furniture), and which
    of them form the outermost row standing apart from the text (the ones worth waiting for another page over)."""
    top = [line for line in lines if line.bottom <= BAND * height and len(line.text) <= 120]
    bottom = [line for line in lines if line.top >= (1 - BAND) * height and len(line.text) <= 120]
    body = statistics.median(line.height for line in lines) if lines else 0.0
    top_row, bottom_row = _outer_row(lines, 0.0, 1.0), _outer_row(lines, height, -1.0)
    apart = [line for line in top if any(line is mine for mine in top_row)]
    apart += [line for line in bottom if any(line is mine for mine in bottom_row)]
    return PageBands(top, bottom, body, apart)


class FurnitureTracker:
    """The band texts of every page parsed so far; which runs of a page are furniture.

    A band run that repeats on no page seen yet is decided once the pages within NEIGHBOURS of its page are parsed
    (a running header skips a chapter's opening page, and alternates between even and odd pages)."""

    NEIGHBOURS = 2

    def __init__(self, pages: list[int] | None = None) -> None:
        self._lock = threading.Lock()
        self._seen: dict[int, tuple[set[str], set[str]]] = {}
        self._pages = set(pages or [])

    def add(self, page_no: int, bands: PageBands) -> None:
        """Remember a parsed page's band texts."""
        with self._lock:
            self._seen[page_no] = (
                {shape(line.text) for line in bands.top},
                {shape(line.text) for line in bands.bottom},
            )

    def pages_seen(self) -> int:
        """How many pages were parsed so far."""
        with self._lock:
            return len(self._seen)

    def undecided(self, page_no: int, bands: PageBands) -> bool:
        """True when a band run could be furniture, repeats on no other page parsed so far, and a page near it that
        could tell is still to be parsed."""
        with self._lock:
            others = [seen for number, seen in self._seen.items() if number != page_no]
            near = range(page_no - self.NEIGHBOURS, page_no + self.NEIGHBOURS + 1)
            waiting = any(n in self._pages and n not in self._seen for n in near if n != page_no)
            if not others:
                waiting = waiting or not self._pages
        if not waiting:
            return False
        for side, lines in ((0, bands.top), (1, bands.bottom)):
            for line in lines:
                if is_page_number(line.text) or bands.heading_sized(line):  # decided already: furniture, content
                    continue
                if not any(line is apart for apart in bands.apart):  # a line of the text: not worth the wait
                    continue
                if not any(shape(line.text) in seen[side] for seen in others):
                    return True
        return False

    def furniture(self, page_no: int, bands: PageBands) -> list[Line]:
        """The outermost runs of the page's bands that are page numbers or repeat in the same band of another page;
        a run below the page's first content run (or above its last) is content, and so is a heading-sized run."""
        with self._lock:
            others = [seen for number, seen in self._seen.items() if number != page_no]

        def qualifies(side: int, line: Line) -> bool:
            if is_page_number(line.text):
                return True
            return not bands.heading_sized(line) and any(shape(line.text) in seen[side] for seen in others)

        top = [line for line in bands.top if qualifies(0, line)]
        content_top = min((line.top for line in bands.top if line not in top), default=float("inf"))
        bottom = [line for line in bands.bottom if qualifies(1, line)]
        content_bottom = max((line.bottom for line in bands.bottom if line not in bottom), default=float("-inf"))
        return [line for line in top if line.top < content_top] + [
            line for line in bottom if line.bottom > content_bottom
        ]
