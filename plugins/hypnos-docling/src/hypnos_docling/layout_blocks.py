"""Rows of one text column read as a person would: headings, paragraphs, list items, code, tables, a table of
contents and captions, top to bottom.

A heading is a short row set apart from the text around it, larger than the body text or in a bold face at its
size, or numbered (`2.2`, `A.1`) in a face other than the body's; a row that carries a paragraph on is never one.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from hypnos_docling.layout_grid import Grid, ruled_table
from hypnos_docling.layout_lines import Fonts, Line, is_italic, mono_share, pitch
from hypnos_docling.layout_tables import DOT_LEADER, LIST_MARKER, table_run

BULLET = re.compile(r"^([\u2022\u25cf\u25e6\u25aa\u25a0\u2023\u2043\u2219\u00b7*\-\u2013])\s*(.*)$")
ENUMERATOR = re.compile(r"^(\(?\d{1,2}[.)]|\(?[a-z][.)])\s+(.*)$|^(\d{1,2}[.)])$")
NUMBERING = re.compile(r"^((?:\d{1,2}|[A-Z])(?:\.\d{1,2}){0,4})\.?\s+\S")
CAPTION = re.compile(  # `Figure 3:`, `Table A.1`, `Fig. IV` (not `Table of Contents`)
    r"^(?i:figure|fig\.|table|listing)\s+(?:\d+(?:[.\-]\d+)*|[A-Z](?:[.\-]\d+)*|[IVXL]+)[.:\-\u2013]?(?:\s|$)"
)
CODE_SHARE = 0.9  # a row this much in monospace faces is a line of code (a path or a name in the text is not)
CODE_GAP = 2.7  # code rows this close (in line heights) are one listing: one blank line inside it keeps it whole
SENTENCE_END = (".", ":", ";", "!", "?")
PARAGRAPH_END = 0.25  # a sentence ending this far (share of the column) short of its right edge ends a paragraph
STRONG_BULLET = re.compile(r"^[\u2022\u25cf\u25e6\u25aa\u25a0]\s")
TOC_ENTRY = re.compile(r"^(.*?)\s*(?:(?:\.\s?){3,}|\u2026+|\s{2,})\s*(\d{1,4}|[ivxlc]{1,6})$")
CHAPTER = re.compile(r"^(?:chapter|part|appendix)\s+(?:\d{1,3}|[A-Z]|[IVXL]+)$", re.IGNORECASE)  # its title follows
DEFINITION = re.compile(r"\[(?:Function|Macro|Variable|Constant|Data Type|Type|Command|User Option|Method)\]$")
LINK_LINE = re.compile(r"^(?:\S+[.:]\s+)?(?:[a-z]+://|www\.)\S+$")  # `http://x.org/doc/`, `himself. http://...`
CONTENTS_TITLE = re.compile(r"^(?:table of )?contents$|^list of (?:figures|tables|examples|listings)$", re.IGNORECASE)
FIELD = re.compile(r"^[^:]{1,40}:$|^\w+:\s*[^A-Za-z]*$")
BYLINE_JOINTS = ("by", "and", "&")  # `by` / `Joe Chang` / `and` / `Brad Connors`: an article's authors
PAGE_NUMBER = re.compile(r"^(?:\d{1,4}|[ivxlc]{1,6})$")
LEADER = re.compile(r"^[.\s\u2026\u00b7]+$")
ADMONITION = re.compile(r"^(?:note|warning|tip|caution|important|danger|attention|hint)\s*:?$", re.IGNORECASE)


@dataclass
class Block:
    """A piece of the page: kind is heading, paragraph, list_item, code, table, toc, caption or picture."""

    kind: str
    top: float
    lines: list[Line] = field(default_factory=list)
    text: str = ""
    level: int = 1
    enumerated: bool = False
    marker: str = ""  # an enumerated item's number as printed (`0.`, `b)`)
    unmarked: bool = False  # a list item known by its indent alone (its marker drawn, not written)
    cells: list[list[str]] = field(default_factory=list)
    entries: list[tuple[str, str]] = field(default_factory=list)
    rows: list[list[Line]] = field(default_factory=list)
    figure: object = None


def _text(row: list[Line]) -> str:
    return " ".join(line.text for line in row).strip()


def _height(row: list[Line]) -> float:
    return max(line.height for line in row)


def _font(row: list[Line]) -> str:
    weights: dict[str, int] = {}
    for line in row:
        for key, count in (line.faces or {line.font: len(line.text)}).items():
            weights[key] = weights.get(key, 0) + count
    return max(weights, key=lambda key: weights[key])


def _faces(row: list[Line]) -> set[str]:
    """The fonts of the row's letters (a line of text with a name set in another face has both)."""
    return {key for line in row for key, count in (line.faces or {line.font: 1}).items() if count}


def _gap(above: list[Line], below: list[Line]) -> float:
    """Baseline distance in font sizes of the lower row."""
    return pitch(above, below) / _height(below)


def heading_level(text: str, height: float, fonts: Fonts) -> int:
    """1-3: the depth of the numbering when there is one, else the size relative to the body text."""
    number = NUMBERING.match(text)
    if number and not number.group(1).isalpha():
        return min(number.group(1).count(".") + 1, 3)
    ratio = height / fonts.body_height  # sizes come from advances, which a bold face widens by a fifth or so
    return 1 if ratio >= 1.8 else 2 if ratio >= 1.4 else 3


def _heading_like(row: list[Line], fonts: Fonts) -> bool:
    text = _text(row)
    if not text or len(text) > 120 or len(text.split()) > 14 or (text.endswith((".", ",", ";")) and len(text) > 40):
        return False
    if text.startswith(("...", "\u2026")):  # an ellipsis opens text carried on (`...end of sample chapter`)
        return False
    if CAPTION.match(text) or TOC_ENTRY.match(text) or BULLET.match(text) or DOT_LEADER.search(text):
        return False
    if LINK_LINE.match(text) or "://" in text:  # a link set on a line of its own, a reference with its address
        return False
    letters = sum(ch.isalpha() for ch in text)
    if 2.5 * letters < len(text.replace(" ", "")) or not re.search(r"[^\W\d_]{2}", text):
        return False  # a formula's braces and signs, an index's group letters (`E G`): no words
    if text.count("(") != text.count(")") or DEFINITION.search(text):  # a signature's lines: `int f (a, [Function]`
        return False
    if not any(ch.isalpha() for ch in text) or text.casefold() in BYLINE_JOINTS:
        return False
    if FIELD.match(text):  # a label introducing what follows (`TITLE :`, `Since: 2.0`)
        return False
    if len(row) >= 2 and LIST_MARKER.match(row[0].text.strip()):  # judged by its text, not by its marker's font
        row = row[1:]
    font = _font(row)
    if font in fonts.mono:
        return False
    # the size of the row's own face, that of its longest run in it: a bold `Note:` opening a line of body text does
    # not make it a heading, nor a logo's raised letters (`LaTeX`) that stretch one run's box
    own = [line for line in row if line.font == font]
    ratio = (max(own, key=lambda line: len(line.text)).height if own else _height(row)) / fonts.body_height
    if ADMONITION.match(text) and ratio < 1.5:  # `Note` over an admonition's text: a label, not a section
        return False
    distinct = font != fonts.body and bool(font)
    if ratio < 1.15 and is_italic(font) and font not in fonts.bold and not NUMBERING.match(text):
        return False  # an italic line at about the body's size: a verse, a quotation, a title cited in the text
    if ratio >= 1.15:
        return True
    return ratio >= 0.9 and distinct and (font in fonts.bold or NUMBERING.match(text) is not None or ratio >= 1.0)


def code_text(rows: list[list[Line]]) -> str:
    """A code block's rows as text, each run indented by its distance from the block's leftmost run; a gap of a
    line or more between two rows is kept as a blank line."""
    left = min(line.left for row in rows for line in row)
    widths = [(line.right - line.left) / len(line.text) for row in rows for line in row if len(line.text) >= 3]
    advance = sorted(widths)[len(widths) // 2] if widths else 5.0
    steps = [pitch(above, below) for above, below in itertools.pairwise(rows)]
    usual = max(min(steps), 0.9 * _height(rows[0])) if steps else 0.0  # one line's pitch
    out = []
    for index, row in enumerate(rows):
        if index and usual > 0 and 1.6 * usual < steps[index - 1] < 4 * usual:
            out.append("")
        text, column = "", 0
        for line in row:
            start = max(round((line.left - left) / advance), column + (1 if text else 0))
            text += " " * (start - column) + line.text
            column = start + len(line.text)
        out.append(text.rstrip())
    return "\n".join(out)


def _text_left(lines: list[Line]) -> float:
    """Where a list item's text starts (after a marker set apart)."""
    if len(lines) >= 2 and LIST_MARKER.match(lines[0].text.strip()):
        return lines[1].left
    return lines[0].left + 6


def _list_start(row: list[Line]) -> tuple[bool, str, str] | None:
    """(enumerated, the item's text, its number as printed: `0.`, `a)`; "" for a bullet) when the row opens one."""
    first = row[0].text.strip()
    rest = " ".join(line.text for line in row[1:]).strip()
    if bullet := BULLET.match(first):
        body = (bullet.group(2) + " " + rest).strip()
        if body and (len(first) == 1 or first[1] == " " or first[0] in "\u2022\u25cf\u25e6\u25aa\u25a0"):
            return False, body, ""
    if enum := ENUMERATOR.match(first):
        body = ((enum.group(2) or "") + " " + rest).strip()
        number = (enum.group(1) or enum.group(3) or "").strip("()")
        if body:  # `3)` and `(3)` as the Markdown `3.`, letters as printed
            return True, body, number[:-1] + "." if number[:-1].isdigit() else number
    return None


def blocks_of(rows: list[list[Line]], fonts: Fonts, grids: Callable[[], list[Grid]] | None = None) -> list[Block]:
    """The column's rows as blocks in reading order; `grids` gives the page's ruled grids (asked for only when a row
    could be a table's)."""
    blocks: list[Block] = []
    rows = [_collapse_leaders(row) for row in rows]
    body_rows = [row for row in rows if _font(row) == fonts.body]
    margin = min((row[0].left for row in body_rows), default=0.0)
    right_edge = max((row[-1].right for row in body_rows), default=0.0)
    index = 0
    while index < len(rows):
        row = rows[index]
        text = _text(row)
        height = _height(row)
        previous = blocks[-1] if blocks else None
        prev_row = rows[index - 1] if index else None
        gap = _gap(prev_row, row) if prev_row else 1e9
        font = _font(row)
        share = mono_share(row, fonts.mono)
        carried = (
            previous is not None
            and previous.kind == "paragraph"
            and gap < 1.6
            and (share < 1.0 or not previous.text.endswith(SENTENCE_END))
        )
        listed = STRONG_BULLET.match(text) is not None  # `• INTEGER;` in a typewriter face is a list item
        if share >= CODE_SHARE and not carried and not listed:  # a line of names carrying a paragraph on stays in it
            if not (previous and previous.kind == "code" and gap < CODE_GAP):
                blocks.append(Block("code", row[0].top))
            blocks[-1].lines.extend(row)
            blocks[-1].rows.append(row)
            index += 1
            continue
        ruled = ruled_table(rows, index, grids()) if grids is not None and len(row) >= 2 else None
        if ruled is not None:
            cells, end = ruled
            blocks.append(Block("table", row[0].top, [x for r in rows[index:end] for x in r], cells=cells))
            index = end
            continue
        if entry := _contents_entry(row, text, previous):
            if previous and previous.kind == "toc":
                previous.entries.append(entry)
                previous.lines.extend(row)
            else:
                blocks.append(Block("toc", row[0].top, list(row), entries=[entry]))
            index += 1
            continue
        table = table_run(rows, index, fonts.mono)
        if table and not _numbered_headings(rows[index : table[1]], fonts):
            cells, end = table
            blocks.append(Block("table", row[0].top, [x for r in rows[index:end] for x in r], cells=cells))
            index = end
            continue
        continues = (
            previous is not None
            and previous.kind in ("paragraph", "list_item", "caption")
            and gap < 1.6
            and (
                font == _font(previous.lines[-1:])
                or _font(previous.lines[-1:]) in _faces(row)
                or (gap < 1.4 and not previous.text.endswith(SENTENCE_END))  # a wrapped line, whatever its face
            )
            and abs(height - previous.lines[-1].height) < 0.2 * height
            and not (prev_row is not None and _ends_paragraph(prev_row, margin, right_edge))
        )
        if (
            not continues
            and _heading_like(row, fonts)
            and not _definition_term(rows, index, fonts)
            and not (previous is not None and previous.text.casefold() in BYLINE_JOINTS)
            and (
                index + 1 >= len(rows)
                or _font(rows[index + 1]) != font
                or abs(_height(rows[index + 1]) - height) > 0.1 * height
                or _gap(row, rows[index + 1]) >= 1.6
                or _heading_like(rows[index + 1], fonts)
            )
        ):
            chapter = previous is not None and previous.kind == "heading" and CHAPTER.match(previous.text) is not None
            if previous and previous.kind == "heading" and ((gap < 1.5 and _font(previous.lines) == font) or chapter):
                previous.text += " " + text
                previous.lines.extend(row)
            else:
                blocks.append(Block("heading", row[0].top, list(row), text=text,
                                    level=heading_level(text, height, fonts)))  # fmt: skip
            index += 1
            continue
        item = _list_start(row)
        if item is not None and not (continues and previous is not None and previous.kind == "paragraph"):
            blocks.append(Block("list_item", row[0].top, list(row), text=item[1], enumerated=item[0], marker=item[2]))
            index += 1
            continue
        if continues and previous is not None:
            carried_on = previous.unmarked and text[:1].islower() and abs(row[0].left - previous.lines[0].left) < 2
            if previous.kind == "list_item" and row[0].left < _text_left(previous.lines) - 2 and not carried_on:
                continues = False
            else:
                joined = previous.text
                joined = joined[:-1] + text if joined.endswith("-") and text[:1].islower() else joined + " " + text
                previous.text = joined
                previous.lines.extend(row)
                index += 1
                continue
        if _unmarked_item(rows, index, margin, right_edge, fonts):
            blocks.append(Block("list_item", row[0].top, list(row), text=text, unmarked=True))
            index += 1
            continue
        kind = "caption" if CAPTION.match(text) else "paragraph"
        blocks.append(Block(kind, row[0].top, list(row), text=text))
        index += 1
    for block in blocks:
        if block.kind == "code":
            block.text = code_text(block.rows)
    return _mend_contents(blocks)


def _definition_term(rows: list[list[Line]], index: int, fonts: Fonts) -> bool:
    """A row at about body size over body text indented past it (the next line, and the one after unless another
    term follows, or the row after it starts left of the term): a term of a definition list (DocBook's variablelist,
    texinfo's @table), not a heading; a paragraph indenting its first line only goes back to the margin on its
    second."""
    row = rows[index]
    if index + 1 >= len(rows) or _height(row) >= 1.15 * fonts.body_height or NUMBERING.match(_text(row)):
        return False
    body = rows[index + 1]
    if body[0].left - row[0].left < 1.5 * fonts.body_height or _font(body) != fonts.body:
        return False
    after = rows[index + 2] if index + 2 < len(rows) else None
    if after is None or abs(after[0].left - body[0].left) < 2 or _font(after) != fonts.body:
        return True
    return after[0].left < row[0].left - 2  # the list's last entry: the text after it starts left of its term


def _numbered_headings(rows: list[list[Line]], fonts: Fonts) -> bool:
    """Rows that each open with a section number and read as headings (`3.2 Installing`, `3.2.1 Packages` set one
    under the other) are headings, not a table of numbers and titles."""
    return all(NUMBERING.match(_text(row)) and _heading_like(row, fonts) for row in rows)


def _collapse_leaders(row: list[Line]) -> list[Line]:
    """A contents row whose runs between its title and its page number are leader dots set apart (groff spaces each
    dot on a grid): one run `title . . . 7`, so that it reads as a contents entry and never as a table row."""
    if len(row) < 3 or not PAGE_NUMBER.match(row[-1].text.strip()):
        return row
    if not all(LEADER.match(line.text) for line in row[1:-1]):
        return row
    first, last = row[0], row[-1]
    merged = Line(first.text.rstrip(" .") + " . . . . " + last.text.strip(), first.left, min(x.top for x in row),
                  last.right, max(x.bottom for x in row), first.font, first.size)  # fmt: skip
    merged.faces = dict(first.faces)
    return [merged]


def _contents_entry(row: list[Line], text: str, previous: Block | None) -> tuple[str, str] | None:
    """(title, page) when the row is an entry of a table of contents: a title, leader dots and a page number; or,
    under a `Contents` heading or another entry, a title and a page number set apart."""
    if toc := TOC_ENTRY.match(text):
        if DOT_LEADER.search(text) or "\u2026" in text:
            return toc.group(1).strip(), toc.group(2)
    in_contents = previous is not None and (
        previous.kind == "toc" or (previous.kind == "heading" and CONTENTS_TITLE.match(previous.text.strip()))
    )
    if in_contents and len(row) >= 2 and PAGE_NUMBER.match(row[-1].text.strip()):
        title = _text(row[:-1]).rstrip(" .")
        if any(ch.isalpha() for ch in title):
            return title, row[-1].text.strip()
    return None


def _mend_contents(blocks: list[Block]) -> list[Block]:
    """A table whose every row ends in a page number, the numbers never going down, is contents; a contents page
    carried on from the last: a heading (a chapter's entry set in bold) or a table of title and page number right
    above contents entries is an entry too."""
    for block in blocks:
        if block.kind == "table" and _contents_rows(block) and _ascending([row[-1] for row in block.cells]):
            block.kind, block.entries = "toc", [entry for entry in _contents_rows(block) if entry]
    mended: list[Block] = []
    for block in reversed(blocks):
        after = mended[-1] if mended else None
        if block.kind == "toc" and after is not None and after.kind == "toc":
            after.entries[:0], after.lines[:0], after.top = block.entries, block.lines, block.top
            continue
        entries = _contents_entry(block.lines, _text(block.lines), after) if block.kind == "heading" else None
        if after is not None and after.kind == "toc" and entries:
            after.entries.insert(0, entries)
            after.lines[:0] = block.lines
            after.top = block.top
            continue
        mended.append(block)
    return mended[::-1]


def _contents_rows(block: Block) -> list[tuple[str, str] | None]:
    """The table's rows as contents entries (title, page) when each ends in a page number after some words."""
    entries: list[tuple[str, str] | None] = []
    for cells in block.cells:
        title = " ".join(cells[:-1]).strip()
        if len(cells) < 2 or not cells[-1].strip().isdigit() or not any(ch.isalpha() for ch in title):
            return []
        entries.append((title, cells[-1].strip()))
    return entries if len(entries) >= 2 else []


def _ascending(numbers: list[str]) -> bool:
    values = [int(number) for number in numbers]
    return all(a <= b for a, b in itertools.pairwise(values))


def _ends_paragraph(row: list[Line], margin: float, right_edge: float) -> bool:
    """A row ending a sentence well short of the column's right edge is the last line of its paragraph."""
    short = row[-1].right < right_edge - PARAGRAPH_END * (right_edge - margin)
    return short and _text(row).endswith(SENTENCE_END)


def _unmarked_item(rows: list[list[Line]], index: int, margin: float, right_edge: float, fonts: Fonts) -> bool:
    """An item of a list whose markers are drawn, not written (Chromium's discs): one of two or more short body
    rows in a run indented past the column's margin."""

    def indented(at: int) -> bool:
        if at < 0 or at >= len(rows):
            return False
        row = rows[at]
        offset = row[0].left - margin
        short = row[-1].right < right_edge - 0.15 * (right_edge - margin)
        return len(row) == 1 and _font(row) == fonts.body and 10 <= offset <= 60 and short

    if not indented(index):
        return False
    near = [at for at in (index - 1, index + 1) if indented(at)]
    return any(abs(rows[at][0].left - rows[index][0].left) < 2 and abs(_gap(rows[min(at, index)], rows[max(at, index)]))
               < 1.8 for at in near)  # fmt: skip


def ocr_blocks(rows: list[list[Line]]) -> list[Block]:
    """OCR rows kept as the lines they are: one paragraph a line (the reader keeps the scan's line breaks)."""
    return [Block("paragraph", row[0].top, list(row), text=_text(row)) for row in rows if _text(row)]
