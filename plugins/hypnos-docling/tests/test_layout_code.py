"""Code listings stay code and table headers stay tables: what the converter makes of small reportlab PDFs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypnos_docling.markdown import join_pages

sys.path.insert(0, str(Path(__file__).parent))

from drawn_pdf import markdown_of as _markdown

BODY = [
    "Signal client value window buffer header format buffer figure figure signal answer section.",
    "Channel driver shared output option server report element client footer and more words here.",
    "Index method output shared cache index table sample input of the parser stream.",
]


def _body(canvas: Any, top: float) -> float:
    canvas.setFont("Times-Roman", 10.5)
    for line in BODY:
        canvas.drawString(70, top, line)
        top -= 13.5
    return top


def test_a_listing_begun_on_a_page_foot_is_one_code_block_not_a_table() -> None:
    def draw(canvas: Any) -> None:
        top = _body(canvas, 740)
        for _ in range(40):
            top = _body(canvas, top) if top > 140 else top
        canvas.setFont("Courier", 9)
        canvas.drawString(82, top - 6, "def read_figure(path, limit=10):")  # the page's only monospace run
        canvas.showPage()
        canvas.setFont("Courier", 9)
        canvas.drawString(103.6, 740, "values = open_record(path)")
        canvas.drawString(103.6, 729, "for item in values[:limit]:")
        canvas.drawString(125.2, 718, "print(item)")
        canvas.drawString(103.6, 707, "return values")
        _body(canvas, 680)

    markdown = _markdown(draw)
    assert "|" not in markdown
    fence = markdown.split("```\n")[1].splitlines()
    assert [line.strip() for line in fence] == [
        "def read_figure(path, limit=10):", "values = open_record(path)", "for item in values[:limit]:",
        "print(item)", "return values",
    ]  # fmt: skip
    assert markdown.count("```") == 2


def test_a_bold_header_of_like_cells_heads_its_table() -> None:
    def draw(canvas: Any) -> None:
        top = _body(canvas, 740) - 10
        canvas.setFont("Times-Bold", 9.5)
        for column, name in enumerate(["Format 1", "Layout 2", "Header 3", "Layout 4", "Layout 5"]):
            canvas.drawString(76 + 96.8 * column, top, name)
        canvas.setFont("Times-Roman", 9.5)
        for row, first in enumerate(["vector 1", "matrix 2", "record 3"]):
            cells = [first, "511.7", "955.7", f"{row + 1}60.0", "22.1"]
            for column, text in enumerate(cells):
                canvas.drawString(76 + 96.8 * column, top - 17.5 * (row + 1), text)
        _body(canvas, top - 80)

    markdown = _markdown(draw)
    assert "```" not in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    assert [cell.strip() for cell in rows[0].strip("|").split("|")] == [
        "Format 1", "Layout 2", "Header 3", "Layout 4", "Layout 5",
    ]  # fmt: skip
    assert len(rows) == 5 and "vector 1" in rows[2]


def test_a_listing_cut_by_the_column_break_is_one_code_block_indented_as_written() -> None:
    column = ["Index table table result module", "layout value channel request", "sample output cache signal table"]

    def draw(canvas: Any) -> None:
        canvas.setFont("Times-Roman", 10.5)
        for n in range(12):
            canvas.drawString(70, 740 - 13.5 * n, column[n % 3])
            canvas.drawString(322, 560 - 13.5 * n, column[(n + 1) % 3])
        canvas.setFont("Courier", 9)
        for n, line in enumerate(["def read_index(path, limit=10):", "    values = open_section(path)"]):
            canvas.drawString(82, 570 - 11 * n, line)
        for n, line in enumerate(["        print(item)", "    return values"]):
            canvas.drawString(334, 740 - 11 * n, line)

    markdown = _markdown(draw)
    assert markdown.count("```") == 2
    assert markdown.split("```\n")[1].splitlines() == [
        "def read_index(path, limit=10):",
        "    values = open_section(path)",
        "        print(item)",
        "    return values",
    ]


def test_a_listing_cut_by_a_page_break_is_mended() -> None:
    joined = join_pages(["Intro.\n\n```\ndef f():\n```", "```\n    return 1\n```\n\nAfter."])
    assert joined == "Intro.\n\n```\ndef f():\n    return 1\n```\n\nAfter.\n"
