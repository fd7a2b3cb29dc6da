"""The layout corpus: documents made from a known truth (headings, tables, lists, code, pictures, a table of contents,
running headers and page numbers), rendered to PDF by reportlab and, where Debian's chromium is installed, by
Chromium's print-to-PDF. The truth is what a reader of the Markdown should find."""

from __future__ import annotations

import html
import random
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypnos_docling.testing import picture_png

CHROMIUM = "/usr/bin/chromium"
SPECIAL = "Compare a < b && c > d in the <a> element, at 5 % of the cost."
WORDS = (
    "system value table record field index module parser output input stream buffer layout column page figure "
    "result section method option server client request answer format encoding string number element window "
    "shared memory cache driver report signal vector matrix sample filter channel header footer schema"
).split()


@dataclass
class Heading:
    """A section heading: level 1-3, its text with the numbering a reader sees (e.g. `2.1 Naming`)."""

    level: int
    text: str


@dataclass
class Para:
    """A paragraph of body text."""

    text: str


@dataclass
class Table:
    """A table: rows[0] is the header row; a cell's words may wrap over lines in the PDF."""

    rows: list[list[str]]
    borders: bool


@dataclass
class Items:
    """A bullet or numbered list."""

    items: list[str]
    ordered: bool


@dataclass
class Code:
    """A monospace code block, indentation included."""

    lines: list[str]


@dataclass
class Figure:
    """A picture with its caption (`Figure N: ...`) below it."""

    caption: str
    width: int = 120
    height: int = 80


@dataclass
class Toc:
    """A table of contents: entries with dot leaders and page numbers."""

    entries: list[tuple[str, int]]


Block = Heading | Para | Table | Items | Code | Figure | Toc


@dataclass
class Truth:
    """One corpus document: its blocks, page layout and the furniture printed on every page."""

    name: str
    renderer: str
    blocks: list[Block]
    two_column: bool = False
    running_header: str | None = None
    page_numbers: bool = False
    furniture: list[str] = field(default_factory=list)


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def _sentence(rng: random.Random, count: int) -> str:
    text = _words(rng, count)
    return text[0].upper() + text[1:] + "."


def _paragraph(rng: random.Random, sentences: int = 4) -> Para:
    return Para(" ".join(_sentence(rng, rng.randint(8, 14)) for _ in range(sentences)))


def _table(rng: random.Random, columns: int, borders: bool, multiline: bool) -> Table:
    header = [_words(rng, 1).capitalize() + f" {c + 1}" for c in range(columns)]
    rows = [header]
    for r in range(rng.randint(3, 5)):
        row = []
        for c in range(columns):
            if c == 0:
                row.append(f"{rng.choice(WORDS)} {r + 1}")
            elif multiline and c == 1 and r % 2 == 0:
                row.append(_words(rng, 7))  # wraps in its column
            else:
                row.append(f"{rng.randint(1, 999)}.{rng.randint(0, 9)}")
        rows.append(row)
    return Table(rows, borders)


def _items(rng: random.Random, ordered: bool) -> Items:
    return Items([_words(rng, rng.randint(3, 6)).capitalize() for _ in range(rng.randint(3, 5))], ordered)


def _code(rng: random.Random) -> Code:
    name = rng.choice(WORDS)
    return Code([
        f"def read_{name}(path, limit=10):",
        f"    values = open_{rng.choice(WORDS)}(path)",
        "    for item in values[:limit]:",
        "        print(item)",
        "    return values",
    ])  # fmt: skip


def build_truth(index: int, renderer: str) -> Truth:
    """Corpus document number `index`: a mix of features chosen by the index, words by a seeded generator."""
    rng = random.Random(index * 7919 + (1 if renderer == "chromium" else 0))
    numbered = index % 2 == 0
    two_column = index % 6 == 5
    blocks: list[Block] = []
    sections: list[tuple[str, list[Block]]] = []
    for s in range(1, 4):
        title = (f"{s} " if numbered else "") + _words(rng, 2).title()
        body: list[Block] = [_paragraph(rng)]
        for sub in range(1, 3):
            sub_title = (f"{s}.{sub} " if numbered else "") + _words(rng, rng.randint(1, 3)).title()
            body.append(Heading(2, sub_title))
            body.append(_paragraph(rng, rng.randint(2, 4)))
            feature = (index + s * 3 + sub) % 5
            if feature == 0 and not two_column:
                body.append(_table(rng, 2 + (index + s) % 5, borders=(index + s) % 3 != 0, multiline=s == 2))
            elif feature == 1:
                body.append(_items(rng, ordered=(index + sub) % 2 == 0))
            elif feature == 2:
                body.append(_code(rng))
            elif feature == 3 and index % 2 == 1:
                body.append(Heading(3, (f"{s}.{sub}.1 " if numbered else "") + _words(rng, 2).title()))
                body.append(_paragraph(rng, 2))
            body.append(_paragraph(rng, 2))
        if s == 2 and not two_column:
            body.insert(1, Figure(f"Figure {index % 4 + 1}: {_words(rng, 4)}"))
        if s == 3:
            body.append(Para(SPECIAL))
        sections.append((title, body))
    if index % 5 == 0 and not two_column:
        pages = [(title, 2 + n) for n, (title, _) in enumerate(sections)]
        blocks.append(Heading(1, "Contents"))
        blocks.append(Toc(pages))
    for title, body in sections:
        blocks.append(Heading(1, title))
        blocks.extend(body)
    header = f"Corpus manual {index} - {renderer}" if index % 3 != 1 else None
    return Truth(
        name=f"{renderer}-{index:02d}", renderer=renderer, blocks=blocks, two_column=two_column,
        running_header=header, page_numbers=index % 4 != 3,
    )  # fmt: skip


def corpus(reportlab_docs: int = 18, chromium_docs: int = 16) -> list[tuple[Truth, bytes]]:
    """The corpus documents with their PDFs: reportlab always, Chromium where /usr/bin/chromium exists (reportlab
    makes up the count where it does not)."""
    from docling_corpus_render import chromium_pdf, reportlab_pdf

    documents = []
    with_chromium = Path(CHROMIUM).exists()
    for index in range(reportlab_docs if with_chromium else reportlab_docs + chromium_docs):
        truth = build_truth(index, "reportlab")
        documents.append((truth, reportlab_pdf(truth)))
    if with_chromium:
        with tempfile.TemporaryDirectory() as folder:
            for index in range(chromium_docs):
                truth = build_truth(index, "chromium")
                documents.append((truth, chromium_pdf(truth, Path(folder))))
    return documents


def truth_html(truth: Truth) -> str:
    """The truth as an HTML page for Chromium: columns, borders, a figure with its caption, a dotted TOC."""
    png = picture_png(120, 80)
    import base64

    src = "data:image/png;base64," + base64.b64encode(png).decode()
    parts = []
    for block in truth.blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            parts.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Table):
            rows = []
            for r, row in enumerate(block.rows):
                tag = "th" if r == 0 else "td"
                rows.append("<tr>" + "".join(f"<{tag}>{html.escape(cell)}</{tag}>" for cell in row) + "</tr>")
            parts.append(f'<table class="{"grid" if block.borders else "plain"}">{"".join(rows)}</table>')
        elif isinstance(block, Items):
            tag = "ol" if block.ordered else "ul"
            parts.append(f"<{tag}>" + "".join(f"<li>{html.escape(item)}</li>" for item in block.items) + f"</{tag}>")
        elif isinstance(block, Code):
            parts.append("<pre>" + html.escape("\n".join(block.lines)) + "</pre>")
        elif isinstance(block, Figure):
            parts.append(
                f'<figure><img src="{src}" width="{block.width * 2}" height="{block.height * 2}">'
                f"<figcaption>{html.escape(block.caption)}</figcaption></figure>"
            )
        elif isinstance(block, Toc):
            parts.append(
                '<div class="toc">'
                + "".join(
                    f'<div class="entry"><span>{html.escape(title)} {". " * (48 - len(title))}</span>'
                    f'<span style="flex: 1"></span><span>{page}</span></div>'
                    for title, page in block.entries
                )
                + "</div><div style='break-after: page'></div>"
            )
    columns = "column-count: 2; column-gap: 28px;" if truth.two_column else ""
    margin_boxes = ""
    if truth.running_header:
        margin_boxes += f'@top-center {{ content: "{truth.running_header}"; font-size: 9pt; }}'
    if truth.page_numbers:
        margin_boxes += '@bottom-center { content: "Page " counter(page); font-size: 9pt; }'
    style = (
        f"@page {{ size: letter; margin: 60px 56px; {margin_boxes} }}"
        "body { font-family: 'DejaVu Serif', serif; font-size: 10.5pt; line-height: 1.35; }"
        f"main {{ {columns} }}"
        "h1 { font-size: 20pt; } h2 { font-size: 15pt; } h3 { font-size: 12pt; }"
        "table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 10px; text-align: left; "
        "vertical-align: top; max-width: 150px; } table.grid td, table.grid th { border: 1px solid #333; }"
        "pre { font-family: 'DejaVu Sans Mono', monospace; font-size: 9pt; background: #eee; padding: 6px; }"
        ".toc .entry { display: flex; }"
        "figcaption { font-style: italic; font-size: 9pt; }"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(truth.name)}</title>"
        f"<style>{style}</style></head><body><main>{''.join(parts)}</main></body></html>"
    )


def run_chromium(page: Path, out: Path) -> None:
    """Chromium's headless print-to-PDF of a local HTML file (no header/footer of its own)."""
    subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
            "--disable-dev-shm-usage", f"--print-to-pdf={out}", page.as_uri(),
        ],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
