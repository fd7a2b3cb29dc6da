"""A document's title block on its first page: the title is a heading, the lines set large around it (subtitle,
authors, affiliation, address) are not.

A cover page (a page of large lines and little running text) keeps its largest line as the title; on a first page
that goes on with the text, the centered, unnumbered lines set as headings right after the title are its subtitle
and authors.
"""

from __future__ import annotations

import re

from hypnos_docling.layout_blocks import NUMBERING, Block

_NAME = r"[A-Z][\w.'\-]*(?:\s+[A-Z][\w.'\-]*){1,3}"
BYLINE = re.compile(rf"^(?:by\s+)?{_NAME}(?:(?:\s*,\s*|\s+and\s+){_NAME})*(?:\s+and|\s*,)?$")
COVER_TEXT = 400  # a first page with fewer characters of running text than this is a cover page
CENTERED = 0.03  # a line whose middle is this close to the text's middle (share of the page width) is centered


def _size(block: Block) -> float:
    return max(line.height for line in block.lines)


def _centered(block: Block, middle: float, width: float) -> bool:
    left, right = min(line.left for line in block.lines), max(line.right for line in block.lines)
    return abs((left + right) / 2 - middle) < CENTERED * width and right - left < 0.8 * width


def _numbered(text: str) -> bool:
    """`2.1 Naming`, `A.1 License`; not `X Desktop Group`."""
    number = NUMBERING.match(text)
    return number is not None and (number.group(1)[0].isdigit() or "." in number.group(1))


def _demote(block: Block) -> None:
    block.kind = "paragraph"


def mend_title_block(blocks: list[Block], width: float) -> None:
    """Headings of the first page's title block other than the title become paragraphs (in place)."""
    headings = [block for block in blocks if block.kind == "heading" and block.lines]
    if len(headings) < 2:
        return
    body = sum(len(block.text) for block in blocks if block.kind in ("paragraph", "list_item", "table", "code"))
    if body < COVER_TEXT:
        title = max(headings, key=_size)
        title.level = 1
        for block in headings:
            if block is not title:
                _demote(block)
        return
    lines = [line for block in blocks if block.kind == "paragraph" for line in block.lines]  # the text column
    lines = lines or [line for block in blocks for line in block.lines]
    middle = (min(line.left for line in lines) + max(line.right for line in lines)) / 2
    leading = []
    for block in blocks:
        if block.kind == "heading":
            leading.append(block)
        elif not (leading and block.kind == "paragraph" and block.lines and _centered(block, middle, width)):
            break  # a centered line of the title block that is no heading (an address with its link) goes on it
    joined = False  # `Deri James and` / `Peter Schaffter`, `by Jane Doe`: the authors under the title
    for block in leading[1:]:
        text = block.text.strip()
        named = BYLINE.match(text) is not None and not _numbered(text) and _size(block) < _size(leading[0])
        if named and (joined or text.startswith("by ") or text.endswith((" and", ",")) or " and " in text):
            _demote(block)
            joined = text.endswith((" and", ","))
        else:
            joined = False
    if not leading or not _centered(leading[0], middle, width):
        return
    for block in leading[1:]:
        if not _numbered(block.text) and _centered(block, middle, width) and _size(block) < _size(leading[0]):
            _demote(block)
