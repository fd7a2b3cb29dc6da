"""docling's Markdown of a document with its texts escaped where CommonMark would read them as markup.

A document's own text (`a < b`, the `<main>` element, `*alone*`, `[1]: note`, a line opening with `# ` or `1. `)
must read back as that text, not as raw HTML, emphasis, a link definition, a heading or a list. The texts are
escaped in place for the export and put back after it, so the JSON keeps them as the document has them.
"""

from __future__ import annotations

import re
from typing import Any

_INLINE = re.compile(r"[\\`*<>]|_(?=\W|$)|(?<=\W)_|^_|&(?=#?\w+;)|\[(?=[^\]]*\]\s*[(:\[])|\](?=\s*[(:\[])|~~")
_LINE_START = re.compile(r"^(\s*)(#{1,6}(?=\s|$)|[-+](?=\s|$)|=+\s*$|(\d{1,9})([.)])(?=\s|$)|~~~|\|)")
_BREAK = re.compile(r"^\s*(?:(?:-\s*){3,}|(?:_\s*){3,})$")
_CODE_LABELS = {"code", "formula"}


def escape_inline(text: str) -> str:
    """Characters that would open inline markup (emphasis, code spans, raw HTML, entities, links) backslashed."""
    return _INLINE.sub(lambda match: "".join("\\" + ch for ch in match.group(0)), text)


def escape_heading(text: str) -> str:
    """escape_inline, and a closing run of `#` (which a heading would drop) backslashed."""
    return re.sub(r"(^|\s)(#+\s*)$", r"\1\\\2", escape_inline(text))


def escape_block(text: str) -> str:
    """escape_inline, and each line's opening that would start a block (heading, list, rule, fence) backslashed."""
    lines = []
    for line in escape_inline(text).split("\n"):
        line = line.lstrip(" \t")  # four spaces would open indented code
        if _BREAK.match(line):
            line = "\\" + line
        elif match := _LINE_START.match(line):
            if match.group(3):  # `1. ` and `1) ` open an ordered list: the delimiter is escaped
                start = match.start(4)
            else:
                start = match.start(2)
            line = line[:start] + "\\" + line[start:]
        lines.append(line)
    return "\n".join(lines)


def markdown_of(doc: Any, page_no: int | None = None) -> str:
    """The Markdown of the document (of one page when page_no is given), its texts escaped for CommonMark."""
    saved: list[tuple[Any, str]] = []
    for item in doc.texts:
        label = str(getattr(item.label, "value", item.label))
        if label in _CODE_LABELS or not item.text:
            continue
        saved.append((item, item.text))
        item.text = escape_heading(item.text) if label in ("title", "section_header") else escape_block(item.text)
    for table in doc.tables:
        for cell in table.data.table_cells:
            if cell.text:
                saved.append((cell, cell.text))
                cell.text = escape_inline(cell.text).replace("|", "\\|")
    try:
        return tidy_blocks(doc.export_to_markdown(page_no=page_no, escape_html=False, escape_underscores=False))
    finally:
        for item, text in saved:
            item.text = text


def tidy_blocks(markdown: str) -> str:
    """A blank line before and after each table and fenced block (a table right under a list item would be read as
    that item's continuation), fences closed on a line of their own and at the end."""
    out: list[str] = []
    fence: str | None = None
    for line in markdown.split("\n"):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence) and stripped.strip("`~") == "":
                out.append(line)
                fence = None
                out.append("")
            else:
                out.append(line)
            continue
        opening = re.match(r"^\s*(`{3,}|~{3,})", line)
        table = stripped.startswith("|")
        if out and out[-1].strip() and (opening or (table and not out[-1].strip().startswith("|"))):
            out.append("")
        elif out and out[-1].strip().startswith("|") and stripped and not table:
            out.append("")
        if opening:
            fence = opening.group(1)
        if not (line == "" and out and out[-1] == ""):
            out.append(line)
    if fence is not None:
        out.append(fence)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out)
