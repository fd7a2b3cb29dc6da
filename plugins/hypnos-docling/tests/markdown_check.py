"""Markdown read as a CommonMark reader reads it (markdown-it-py): what text a reader sees, and what breaks.

A conversion's Markdown is broken when a fence is left open or shares its line with text, when text reads as
markup it is not (inline marks around a fence, raw HTML from the document's text), or when the pages joined do not
hold the blocks the pages hold one by one (a fence across a page join swallows every later heading).
"""

from __future__ import annotations

import html
import re
from typing import Any

from markdown_it import MarkdownIt

_PARSER = MarkdownIt("commonmark").enable("table")
_COMMENT = re.compile(r"^<!--.*-->$")


def tokens(markdown: str) -> list[Any]:
    """The block tokens of the text."""
    return _PARSER.parse(markdown)


def rendered_text(markdown: str) -> str:
    """The text a reader sees: the rendered HTML's tags dropped, entities decoded, whitespace collapsed."""
    rendered = _PARSER.render(markdown)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", rendered)).split())


def blocks(markdown: str) -> list[tuple[str, str]]:
    """(kind, text) of the top-level blocks: heading, paragraph, fence, table, list, html, hr, quote."""
    found: list[tuple[str, str]] = []
    stream = tokens(markdown)
    for index, token in enumerate(stream):
        if token.level != 0 or token.nesting == -1:
            continue
        kind = token.type.replace("_open", "")
        text = token.content
        if kind in ("heading", "paragraph") and index + 1 < len(stream):
            text = stream[index + 1].content
        found.append((kind, text))
    return found


def problems(markdown: str) -> list[str]:
    """What breaks in one Markdown text (empty when nothing does)."""
    found = []
    lines = markdown.split("\n")
    for token in tokens(markdown):
        if token.type == "fence":
            start, end = token.map
            closing = lines[end - 1].strip() if end - 1 > start else ""
            if not closing.startswith(token.markup) or closing.strip(token.markup[0]):
                found.append(f"fence opened on line {start + 1} is not closed on a line of its own")
        elif token.type == "inline" and ("```" in token.content or "~~~" in token.content):
            found.append(f"a fence marker inside text: {token.content[:60]!r}")
        elif token.type in ("html_block", "html_inline") and not _COMMENT.match(token.content.strip()):
            found.append(f"raw HTML read from the text: {token.content[:60]!r}")
        elif token.type == "inline":
            found += [
                f"raw HTML read from the text: {child.content[:60]!r}"
                for child in token.children or []
                if child.type == "html_inline" and not _COMMENT.match(child.content)
            ]
        elif token.type in ("hr", "blockquote_open", "code_block"):
            found.append(f"{token.type} the converter never writes, on line {token.map[0] + 1}")
    return found


def join_problems(pages: list[str], joined: str) -> list[str]:
    """What the join broke: each page's headings, fenced lines and tables must be in the joined text as they are in
    the pages (a paragraph, list, table or listing cut by the break may be mended into one)."""
    found = problems(joined)
    whole = blocks(joined)
    separate = [block for page in pages for block in blocks(page)]
    for kind in ("heading",):
        if [text for k, text in whole if k == kind] != [text for k, text in separate if k == kind]:
            found.append(f"the joined {kind}s differ from the pages' {kind}s")
    page_code = [line for kind, text in separate if kind == "fence" for line in text.splitlines()]
    joined_code = [line for kind, text in whole if kind == "fence" for line in text.splitlines()]
    if page_code != joined_code:
        found.append("the joined fenced lines differ from the pages' fenced lines")
    if sum(kind == "table" for kind, _ in whole) > sum(kind == "table" for kind, _ in separate):
        found.append("the join made more tables than the pages hold")
    return found
