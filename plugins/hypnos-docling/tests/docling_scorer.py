"""The corpus scorer: what a reader of the Markdown finds, against the truth the document was made from.

Headings (precision, recall, F1 over their texts), table cells (exact, by position, the header row included), list
items, code blocks (fenced, line for line), the table of contents (and contents pages read as tables), furniture
(running headers and page numbers gone from the Markdown, kept in the JSON), pictures (with bytes; the caption
linked), text holding markup characters read back as itself, and outputs whose Markdown breaks (markdown_check: a
fence left open or across a page join, raw HTML read from the text).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from docling_corpus import SPECIAL, Code, Figure, Heading, Items, Table, Toc, Truth
from markdown_check import join_problems, rendered_text

_LIST = re.compile(r"^\s*(?:[-*+\u2022]|(\d+)[.)])\s+(.*)$")
_PAGE_NUMBER = re.compile(r"^(?:page\s+)?\d{1,4}(?:\s*(?:/|of)\s*\d{1,4})?$", re.IGNORECASE)


def norm(text: str) -> str:
    """Whitespace collapsed, markdown escapes undone, case folded."""
    return " ".join(re.sub(r"\\([\\`*_{}\[\]()#+\-.!|<>&])", r"\1", text).split()).casefold()


@dataclass
class Parsed:
    """The parts of a Markdown text the scorer compares."""

    headings: list[tuple[int, str]] = field(default_factory=list)
    tables: list[list[list[str]]] = field(default_factory=list)
    items: list[tuple[bool, str]] = field(default_factory=list)
    code: list[list[str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # every other non-empty line, normalized


def parse_markdown(markdown: str) -> Parsed:
    """Headings, tables (rows of cells, the separator row left out), list items, fenced code and other lines."""
    parsed = Parsed()
    fence: list[str] | None = None
    table: list[list[str]] | None = None
    for raw in markdown.splitlines():
        if fence is not None:
            if raw.strip().startswith("```"):
                parsed.code.append(fence)
                fence = None
            else:
                fence.append(raw.rstrip())
            continue
        line = raw.strip()
        if line.startswith("|"):
            if table is None:
                table = []
                parsed.tables.append(table)
            if not re.fullmatch(r"\|[\s\-:|]*\|", line):
                table.append([norm(cell) for cell in line.strip("|").split("|")])
            continue
        table = None
        if line.startswith("```"):
            fence = []
        elif match := re.match(r"^(#{1,6})\s+(.*)$", line):
            parsed.headings.append((len(match.group(1)), norm(match.group(2))))
        elif match := _LIST.match(raw):
            parsed.items.append((match.group(1) is not None, norm(match.group(2))))
        elif line:
            parsed.lines.append(norm(line))
    return parsed


@dataclass
class Score:
    """Counts summed over documents; the figures are ratios of them."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, other: Score) -> None:
        """Add another document's counts."""
        self.counts.update(other.counts)

    def ratio(self, hit: str, total: str) -> float:
        """hit / total (1.0 when nothing was expected)."""
        return self.counts[hit] / self.counts[total] if self.counts[total] else 1.0

    def figures(self) -> dict[str, float]:
        """The scorer's table: name -> value."""
        precision = self.ratio("heading_tp", "heading_found")
        recall = self.ratio("heading_tp", "heading_true")
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {
            "heading precision": precision,
            "heading recall": recall,
            "heading F1": f1,
            "heading level right": self.ratio("level_right", "heading_tp"),
            "table cells exact": self.ratio("cell_right", "cell_true"),
            "tables found": self.ratio("table_found", "table_true"),
            "false tables": float(self.counts["table_false"]),
            "list items": self.ratio("item_right", "item_true"),
            "list kind right": self.ratio("item_kind_right", "item_right"),
            "code blocks": self.ratio("code_right", "code_true"),
            "code indentation kept": self.ratio("code_indent_right", "code_true"),
            "toc entries": self.ratio("toc_right", "toc_true"),
            "furniture removed": self.ratio("furniture_removed", "furniture_true"),
            "furniture in json": self.ratio("furniture_json", "furniture_true"),
            "pictures with bytes": self.ratio("picture_bytes", "picture_true"),
            "captions linked": self.ratio("caption_right", "picture_true"),
            "text unescaped": self.ratio("special_right", "special_true"),
            "broken markdown": float(self.counts["broken"]),
            "contents as tables": float(self.counts["toc_table"]),
        }


def _score_tables(truth: list[Table], found: list[list[list[str]]], score: Counter[str]) -> None:
    used: set[int] = set()
    for table in truth:
        rows = [[norm(cell) for cell in row] for row in table.rows]
        score["table_true"] += 1
        score["cell_true"] += sum(len(row) for row in rows)
        best, best_index = 0, None
        for index, candidate in enumerate(found):
            if index in used:
                continue
            right = sum(
                1
                for r, row in enumerate(rows)
                for c, cell in enumerate(row)
                if r < len(candidate) and c < len(candidate[r]) and candidate[r][c] == cell
            )
            if right > best:
                best, best_index = right, index
        if best_index is not None:
            used.add(best_index)
            score["table_found"] += 1
            score["cell_right"] += best
    score["table_false"] += len(found) - len(used)


def score_document(truth: Truth, markdown: str, pages: list[Any], page_count: int) -> Score:
    """One document's counts: `pages` are the engine's PageDone records (json asked for), in order."""
    parsed = parse_markdown(markdown)
    counts: Counter[str] = Counter()
    true_headings = [(block.level, norm(block.text)) for block in truth.blocks if isinstance(block, Heading)]
    found = Counter(text for _, text in parsed.headings)
    true = Counter(text for _, text in true_headings)
    counts["heading_true"] += len(true_headings)
    counts["heading_found"] += len(parsed.headings)
    counts["heading_tp"] += sum((found & true).values())
    found_levels = {text: level for level, text in parsed.headings}
    counts["level_right"] += sum(1 for level, text in true_headings if found_levels.get(text) == level + 1)
    _score_tables([block for block in truth.blocks if isinstance(block, Table)], parsed.tables, counts)
    found_items = Counter(parsed.items)
    found_texts = Counter(text for _, text in parsed.items)
    for block in truth.blocks:
        if isinstance(block, Items):
            for item in block.items:
                counts["item_true"] += 1
                if found_texts[norm(item)] > 0:
                    found_texts[norm(item)] -= 1
                    counts["item_right"] += 1
                    counts["item_kind_right"] += found_items[(block.ordered, norm(item))] > 0
        elif isinstance(block, Code):
            counts["code_true"] += 1
            counts["code_right"] += any(
                [line.strip() for line in fence if line.strip()] == [line.strip() for line in block.lines]
                for fence in parsed.code
            )
            counts["code_indent_right"] += any(
                [line.rstrip() for line in fence if line.strip()] == block.lines for fence in parsed.code
            )
        elif isinstance(block, Toc):
            titles = [text for _, text in parsed.items] + parsed.lines  # entries, not headings or table cells
            for title, _page in block.entries:
                counts["toc_true"] += 1
                counts["toc_right"] += any(text.startswith(norm(title)) for text in titles)
            entries = {norm(title) for title, _ in block.entries}
            counts["toc_table"] += sum(
                any(cell.startswith(entry) for row in found for cell in row for entry in entries)
                for found in parsed.tables
            )
    _score_furniture(truth, parsed, pages, page_count, counts)
    _score_pictures(truth, pages, counts)
    counts["broken"] += bool(join_problems([page.markdown for page in pages], markdown))
    counts["special_true"] += 1
    counts["special_right"] += SPECIAL in rendered_text(markdown)  # as a reader sees it, markup escaped
    return Score(counts)


def _score_furniture(truth: Truth, parsed: Parsed, pages: list[Any], page_count: int, counts: Counter[str]) -> None:
    visible = [text for _, text in parsed.headings] + parsed.lines + [text for _, text in parsed.items]
    in_json = [_furniture_texts(page.json or {}) for page in pages]
    if truth.running_header:
        header = norm(truth.running_header)
        counts["furniture_true"] += page_count
        counts["furniture_removed"] += max(page_count - sum(header in text for text in visible), 0)
        counts["furniture_json"] += sum(any(header == norm(text) for text in texts) for texts in in_json)
    if truth.page_numbers:
        counts["furniture_true"] += page_count
        stray = sum(1 for text in visible if _PAGE_NUMBER.match(text))
        counts["furniture_removed"] += max(page_count - stray, 0)
        counts["furniture_json"] += sum(any(_PAGE_NUMBER.match(norm(text)) for text in texts) for texts in in_json)


def _furniture_texts(document: dict[str, Any]) -> list[str]:
    return [item.get("text", "") for item in document.get("texts", []) if item.get("content_layer") == "furniture"]


def _score_pictures(truth: Truth, pages: list[Any], counts: Counter[str]) -> None:
    pictures = [picture for page in pages for picture in page.pictures]
    for block in truth.blocks:
        if isinstance(block, Figure):
            counts["picture_true"] += 1
            with_bytes = [picture for picture in pictures if picture.png]
            counts["picture_bytes"] += bool(with_bytes)
            counts["caption_right"] += any(norm(picture.caption or "") == norm(block.caption) for picture in pictures)
            if with_bytes:
                pictures.remove(with_bytes[0])


def table(rows: dict[str, dict[str, float]]) -> str:
    """The figures as a Markdown table, one column per corpus part (e.g. reportlab, chromium, all)."""
    names = list(next(iter(rows.values())))
    header = "| measure | " + " | ".join(rows) + " |\n|---|" + "---:|" * len(rows) + "\n"
    body = "".join(
        f"| {name} | " + " | ".join(_fmt(name, part[name]) for part in rows.values()) + " |\n" for name in names
    )
    return header + body


def _fmt(name: str, value: float) -> str:
    return f"{value:.0f}" if name in ("false tables", "broken markdown", "contents as tables") else f"{value:.3f}"
