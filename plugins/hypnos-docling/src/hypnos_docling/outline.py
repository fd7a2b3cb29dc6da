"""A PDF's own outline (its bookmarks) as evidence for its headings.

The outline names the document's headings down to the depth its writer chose, each on the page it points to. A row
of the page that reads as an entry of the page's outline is a heading at the entry's level, whatever its face (a
heading set at body size, in a face the page does not show elsewhere). A row that looks like a heading but that the
outline leaves out is weighed against the headings the outline does name: set as large as they are, it is a heading
the outline would have listed (a byline, a slide's title repeated on its next build, a table's header row), so it is
text; set smaller than any of them, it lies below the outline's depth and stays a heading.
"""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from hypnos_docling.layout_blocks import CONTENTS_TITLE, Block

logger = logging.getLogger(__name__)

MAX_ENTRIES = 4096  # a hostile outline is read this far and no further
MAX_DEPTH = 8
SIZE_SLACK = 0.06  # a row within this share of the smallest outlined heading's size is as large as it
# markup writers leave in their bookmarks: groff's font switches (`F[C]`), texinfo's TeX for the LaTeX logo
# (`L@kern -.36em@raise .3ex@hbox {a}`)
_ESCAPE = re.compile(r"\\?F\[[^\]]*\]|\\f[A-Z0-9]|\\f\(..|@(?:kern|raise|lower)\s*-?[\d.]+\s*(?:em|ex|pt)|@hbox\b")


def title_key(text: str) -> str:
    """Letters and digits only, case folded: `2.1. The pdfmark Operator` reads as `21thepdfmarkoperator`."""
    return re.sub(r"[^0-9a-z]", "", _ESCAPE.sub("", text).casefold())


_NUMBERING = re.compile(r"^(?:chapter|part|appendix|section)?[0-9ivxlc]*[a-z]?[0-9]*$")


def same_title(found: str, entry: str, *, loose: bool = True) -> bool:
    """Whether a row's key reads as an outline entry's: equal, or equal once the numbering one of them carries
    (`2.1`, `Chapter 3`, `Appendix A`) is set aside; `loose`: once any words before it are (a heading's run-in
    label)."""
    if not found or not entry or min(len(found), len(entry)) < 3:
        return found == entry and bool(found)
    if found == entry:
        return True
    longer, shorter = (found, entry) if len(found) > len(entry) else (entry, found)
    if not longer.endswith(shorter) or len(shorter) < 4:
        return False
    return loose or _NUMBERING.match(longer[: len(longer) - len(shorter)]) is not None


@dataclass(frozen=True)
class Entry:
    """One bookmark: its level (1 for the outline's top) and title as written, and the title's key."""

    level: int
    title: str
    key: str


def read_outline(pdf: Any) -> dict[int, list[Entry]]:
    """The outline's entries by the (1-based) page they point to; empty when the PDF has none or pdfium cannot read
    it."""
    entries: dict[int, list[Entry]] = {}
    if pdf is None:
        return entries
    try:
        for mark in itertools.islice(pdf.get_toc(max_depth=MAX_DEPTH), MAX_ENTRIES):
            dest = mark.get_dest()
            index = dest.get_index() if dest is not None else None
            title = mark.get_title() or ""
            key = title_key(title)
            if index is not None and key:
                entries.setdefault(index + 1, []).append(Entry(mark.level + 1, title, key))
    except Exception as error:  # a damaged outline is no outline: the page's typography decides alone
        logger.info("the PDF's outline could not be read: %r", error)
        return {}
    return entries


Style = tuple[str, float]  # a heading's face and box height


def _style(block: Block) -> Style:
    weights: dict[str, int] = {}
    for line in block.lines:
        for key, count in (line.faces or {line.font: len(line.text)}).items():
            weights[key] = weights.get(key, 0) + count
    font = max(weights, key=lambda key: weights[key]) if weights else ""
    # the box's own height: the size calibrated on a page's few runs of a face drifts from page to page
    return font, max((line.bottom - line.top for line in block.lines if line.font == font), default=0.0)


def _alike(a: Style, b: Style) -> bool:
    return a[0] == b[0] and abs(a[1] - b[1]) <= SIZE_SLACK * max(a[1], b[1])


@dataclass
class OutlineGuide:
    """The outline of a document being converted and the styles of the headings matched to it so far (pages are
    handed out in order, one at a time: a page is judged against the pages before it and itself)."""

    entries: dict[int, list[Entry]]
    styles: list[Style] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def apply(self, page_no: int, blocks: list[Block]) -> None:
        """The page's blocks mended by its outline (in place): the rows reading as its entries are headings at the
        entries' levels, the headings styled as outlined ones that the outline leaves out are text."""
        pending = list(self.entries.get(page_no, []))
        matched = _match(pending, blocks)
        self.styles.extend(_style(block) for block in matched)
        headings = [block for block in blocks if block.kind == "heading"]
        title = max(headings, key=lambda block: _style(block)[1]) if page_no == 1 and headings else None
        for block in headings:
            if any(block is mine for mine in matched) or block is title or CONTENTS_TITLE.match(block.text.strip()):
                continue  # the document's own title and a contents page's: headings outlines often leave out
            if not any(_alike(_style(block), known) for known in self.styles):
                continue  # set apart from every outlined heading: below the outline's depth
            if pending:  # an entry of this page no row reads as (its title written otherwise): this one, likely
                pending.pop(0)
                continue
            block.kind = "paragraph"


def _match(pending: list[Entry], blocks: list[Block]) -> list[Block]:
    """The blocks reading as the page's entries, made headings at their levels; the entries matched leave
    `pending`."""
    matched: list[Block] = []
    for block in blocks:
        if not pending:
            break
        if block.kind not in ("heading", "paragraph", "list_item") or len(block.text) > 160:
            continue
        text = f"{block.marker} {block.text}" if block.kind == "list_item" else block.text
        key = title_key(text)
        loose = block.kind == "heading"
        entry = next((entry for entry in pending if same_title(key, entry.key, loose=loose)), None)
        if entry is None:
            continue
        pending.remove(entry)
        block.kind, block.level, block.text = "heading", min(entry.level, 5), text.strip()
        matched.append(block)
    return matched
