"""Running headers, footers and page numbers: short runs in a page's top or bottom band that are a page number or
repeat (digits aside) in the same band of another page of the document.

Pages are parsed in any order and handed out in order; a page's furniture is decided when it is handed out, against
every page parsed by then, so a header first seen on page 1 is known once page 2 is parsed.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from hypnos_docling.layout_lines import Line

BAND = 0.1  # the top and bottom tenth of the page
_PAGE_NUMBER = re.compile(
    r"^(?:[-\u2013\u2014]\s*)?(?:page\s+|p\.\s*)?(?:\d{1,4}|[ivxlc]{1,6})(?:\s*(?:/|of)\s*\d{1,4})?(?:\s*[-\u2013\u2014])?$",
    re.IGNORECASE,
)


def is_page_number(text: str) -> bool:
    """`12`, `- 12 -`, `Page 3`, `3 / 17`, `Page 3 of 17`, `xii`."""
    return bool(_PAGE_NUMBER.match(text.strip()))


def shape(text: str) -> str:
    """The text with digits and whitespace folded, so that `Chapter 2 - page 14` matches `Chapter 2 - page 15`."""
    return re.sub(r"\d+", "#", " ".join(text.split()).casefold())


@dataclass
class PageBands:
    """The runs of one page lying in its top and bottom bands."""

    top: list[Line]
    bottom: list[Line]


def bands_of(lines: list[Line], height: float) -> PageBands:
    """The short runs of the page within BAND of its top or bottom edge (the candidates for furniture)."""
    top = [line for line in lines if line.bottom <= BAND * height and len(line.text) <= 120]
    bottom = [line for line in lines if line.top >= (1 - BAND) * height and len(line.text) <= 120]
    return PageBands(top, bottom)


class FurnitureTracker:
    """The band texts of every page parsed so far; which runs of a page are furniture."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[int, tuple[set[str], set[str]]] = {}

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
        """True when a band run could be furniture but no other page has been parsed to tell."""
        if not any(not is_page_number(line.text) for line in bands.top + bands.bottom):
            return False
        with self._lock:
            return all(number == page_no for number in self._seen)

    def furniture(self, page_no: int, bands: PageBands) -> list[Line]:
        """The runs of the page's bands that are page numbers or repeat in the same band of another page."""
        with self._lock:
            others = [seen for number, seen in self._seen.items() if number != page_no]
        found = []
        for side, lines in ((0, bands.top), (1, bands.bottom)):
            for line in lines:
                if is_page_number(line.text) or any(shape(line.text) in seen[side] for seen in others):
                    found.append(line)
        return found
