"""Pages' markdown joined the way a reader wants it: a paragraph, a list, a table or a code listing cut by a page break
is mended."""

from __future__ import annotations

import re

_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
_SENTENCE_END = (".", "!", "?", ":", ";", '"', "\u201d", ")")


_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _blocks(markdown: str) -> list[str]:
    """The blocks parted by blank lines; a fenced listing is one block whatever blank lines it holds."""
    blocks: list[str] = []
    current: list[str] = []
    fence: str | None = None
    for line in markdown.strip().split("\n"):
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = None
        elif fence is None and not line.strip():
            if current:
                blocks.append("\n".join(current))
            current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _is_paragraph(block: str) -> bool:
    first = block.lstrip()
    return not (first.startswith(("#", "|", "<!--", ">", "```", "~~~")) or _LIST_ITEM.match(first))


def _is_table(block: str) -> bool:
    return all(line.lstrip().startswith("|") for line in block.splitlines())


def _is_code(block: str) -> bool:
    lines = block.strip().splitlines()
    return len(lines) >= 2 and lines[0].strip() == "```" and lines[-1].strip() == "```"


def _is_list(block: str) -> bool:
    return bool(_LIST_ITEM.match(block.lstrip()))


def _columns(row: str) -> int:
    return row.strip().strip("|").count("|") + 1


def _mend(before: str, after: str) -> str | None:
    """The two blocks as one when `after` carries `before` on across a page break, else None."""
    if _is_paragraph(before) and _is_paragraph(after) and not before.rstrip().endswith(_SENTENCE_END):
        if before.rstrip().endswith("-") and after[:1].islower():  # a word hyphenated across the break
            return before.rstrip()[:-1] + after.lstrip()
        return before.rstrip() + " " + after.lstrip()
    if _is_table(before) and _is_table(after):
        rows = after.strip().splitlines()
        if _columns(rows[0]) == _columns(before.strip().splitlines()[0]):
            body = [row for row in rows if not re.fullmatch(r"\s*\|[\s\-:|]*\|\s*", row)]
            return before.rstrip() + "\n" + "\n".join(body)
    if _is_code(before) and _is_code(after):  # the listing's lines, its continuation indented as on its page
        return "\n".join(before.strip().splitlines()[:-1] + after.strip().splitlines()[1:])
    if _is_list(before) and _is_list(after):
        return before.rstrip() + "\n" + after.strip()
    return None


def join_pages(pages: list[str]) -> str:
    """One markdown text of the pages in order, with blocks cut by a page break mended."""
    blocks: list[str] = []
    for page in pages:
        page_blocks = _blocks(page)
        if blocks and page_blocks:
            mended = _mend(blocks[-1], page_blocks[0])
            if mended is not None:
                blocks[-1] = mended
                page_blocks = page_blocks[1:]
        blocks.extend(page_blocks)
    return "\n\n".join(blocks) + ("\n" if blocks else "")
