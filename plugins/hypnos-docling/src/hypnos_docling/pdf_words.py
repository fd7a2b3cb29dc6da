"""Words docling-parse glued together, split again by the page's text as pdfium reads it.

docling-parse joins two words when the PDF sets the space between them by positioning alone (TeX's interword glue:
`themmerged.`), and at times the last word of one line with the first of the next (`ENDAnd`, a box two lines
tall). pdfium's text of the same page keeps the space or the line break; a word that is not one of pdfium's words
but is two of them, written one after the other there, is split in two, each part in the box pdfium gives its
characters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hypnos_docling.layout_lines import Line

Box = tuple[float, float, float, float]
_BREAKS = (" ", "\r\n", "\n", "\r")


@dataclass
class PageText:
    """pdfium's text of one page and the box (top-left points) of its characters `start` to `end`."""

    text: str
    box: Callable[[int, int], Box | None]


def pdfium_text(pdf: object, page_no: int, height: float) -> PageText:
    """The page's text and character boxes from a pypdfium2 document (call only while the document is open)."""
    page = pdf[page_no - 1]  # type: ignore[index]
    textpage = page.get_textpage()
    text = textpage.get_text_range()

    def box(start: int, end: int) -> Box | None:
        boxes = [textpage.get_charbox(index) for index in range(start, end)]
        boxes = [b for b in boxes if b[2] > b[0]]
        if not boxes:
            return None
        left, bottom = min(b[0] for b in boxes), min(b[1] for b in boxes)
        right, top = max(b[2] for b in boxes), max(b[3] for b in boxes)
        return left, height - top, right, height - bottom

    return PageText(text, box)


def _wordlike(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _inside(box: Box | None, cell: Line) -> bool:
    """The box lies within the cell's (2 pt of slack)."""
    return box is not None and (
        box[0] >= cell.left - 2 and box[2] <= cell.right + 2 and box[1] >= cell.top - 2 and box[3] <= cell.bottom + 2
    )


def _split(cell: Line, words: set[str], page: PageText) -> tuple[Line, Line] | None:
    """The cell as two words where pdfium reads it as two at that place on the page."""
    word = cell.text
    for cut in range(1, len(word)):
        head, tail = word[:cut], word[cut:]
        if head not in words or tail not in words or not _wordlike(head) or not _wordlike(tail):
            continue
        for gap in _BREAKS:
            at = page.text.find(head + gap + tail)
            while at >= 0:
                start = at + len(head) + len(gap)
                head_box, tail_box = page.box(at, at + len(head)), page.box(start, start + len(tail))
                if _inside(head_box, cell) and _inside(tail_box, cell):
                    return _part(cell, head, head_box), _part(cell, tail, tail_box)
                at = page.text.find(head + gap + tail, at + 1)
    return None


def _part(cell: Line, text: str, box: Box | None) -> Line:
    assert box is not None
    return Line(text, box[0], box[1], box[2], box[3], cell.font)


def split_glued(cells: list[Line], page: PageText | None) -> list[Line]:
    """The cells with every glued pair split in two, each part in pdfium's box for it."""
    if page is None or not page.text:
        return cells
    words = set(page.text.split())
    out: list[Line] = []
    for index, cell in enumerate(cells):
        parts = _split(cell, words, page) if len(cell.text) >= 2 and cell.text not in words else None
        if parts is None:
            out.append(cell)
            continue
        head, tail = parts
        after = cells[index + 1] if index + 1 < len(cells) else None
        if after is not None and tail.top <= (after.top + after.bottom) / 2 <= tail.bottom:
            tail.font = after.font  # the tail set on the next line takes that line's face, not the head's
        out.extend((head, tail))
    return out
