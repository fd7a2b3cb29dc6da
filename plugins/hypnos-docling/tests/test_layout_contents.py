"""Contents pages and raised marks as real manuals set them (Debian's groff pdfmark.pdf, dblatex's manual and release
notes), drawn with reportlab: a contents page is a list of entries, never a table or a run of headings; a line with
a superscript (`Adobe®`) stays a line of text."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from drawn_pdf import markdown_of

GROFF_ENTRIES = [("1. Introduction", "1"), ("2. Exploiting PDF Document Features", "3"),
                 ("2.1. The pdfmark Operator", "3"), ("2.2. Selecting an Initial Document View", "3"),
                 ("2.3. Adding Document Identification Meta-Data", "3"), ("3. PDF Document Layout", "15")]  # fmt: skip


def _headings(markdown: str) -> list[str]:
    return [line.lstrip("#").strip() for line in markdown.splitlines() if line.startswith("#")]


def test_a_contents_page_with_leader_dots_set_apart_is_a_list() -> None:
    def draw(canvas: Any) -> None:
        canvas.setFont("Times-Bold", 12)
        canvas.drawString(72, 760, "Table of Contents")
        y = 730
        for title, page in GROFF_ENTRIES:
            canvas.setFont("Times-Roman", 10)
            canvas.drawString(72, y, title)
            x = 300.0
            while x < 500:  # groff sets each leader dot on a grid of its own
                canvas.drawString(x, y, ".")
                x += 7.5
            canvas.drawRightString(530, y, page)
            y -= 14

    markdown = markdown_of(draw)
    assert "|" not in markdown
    for title, page in GROFF_ENTRIES:
        escaped = title.replace(". ", "\\. ", 1) if title[1:3] == ". " else title  # `1.` escaped: no nested list
        assert f"- {escaped} \u2026 {page}" in markdown


def test_a_contents_page_without_leaders_under_its_heading_is_a_list_without_headings() -> None:
    chapters = [("1", "Documentation", "1", [("1.1", "Reference", "1")]),
                ("2", "Introduction", "2", [("2.1", "What about DB2LaTeX?", "2"), ("2.2", "Features", "2")]),
                ("3", "Installing the Package", "5", [("3.1", "Content", "5")]),
                ("4", "Release 0.3.12", "7", [])]  # fmt: skip

    def draw(canvas: Any) -> None:
        canvas.setFont("Helvetica-Bold", 20)
        canvas.drawString(72, 760, "Contents")
        y = 720
        for number, title, page, sections in chapters:
            canvas.setFont("Helvetica-Bold", 11)  # a chapter's entry in bold, as LaTeX sets it
            canvas.drawString(72, y, number)
            canvas.drawString(90, y, title)
            canvas.drawRightString(530, y, page)
            y -= 16
            for section, name, at in sections:
                canvas.setFont("Times-Roman", 10)
                canvas.drawString(90, y, section)
                canvas.drawString(118, y, name)
                canvas.drawRightString(530, y, at)
                y -= 14
        canvas.showPage()
        canvas.setFont("Helvetica-Bold", 11)  # the contents carried on: no heading above it
        canvas.drawString(72, 760, "5")
        canvas.drawString(90, 760, "Using dblatex")
        canvas.drawRightString(530, 760, "9")
        canvas.setFont("Times-Roman", 10)
        for n, name in enumerate(["Reference", "Output Formatting Style", "Publishing Outputs"]):
            canvas.drawString(90, 744 - 14 * n, f"5.{n + 1}")
            canvas.drawString(118, 744 - 14 * n, name)
            canvas.drawRightString(530, 744 - 14 * n, str(9 + 3 * n))

    markdown = markdown_of(draw)
    assert "|" not in markdown
    assert _headings(markdown) == ["Contents"]
    assert "- 1 Documentation \u2026 1" in markdown and "- 2.2 Features \u2026 2" in markdown
    assert "- 5 Using dblatex \u2026 9" in markdown and "- 5.3 Publishing Outputs \u2026 15" in markdown


def test_a_line_with_superscripts_stays_a_line_of_text() -> None:
    mark = "\u00ae"
    lines = [["It might appear simple to produce documents in Adobe", mark, "Portable Document Format using"],
             ["groff, whose default output format is the native Adobe", mark, "PostScript format, which"],
             ["producers such as Adobe", mark, "Acrobat Distiller", mark, "or GhostScript expects."]]  # fmt: skip
    from reportlab.pdfbase.pdfmetrics import stringWidth

    def draw(canvas: Any) -> None:
        y = 740
        for parts in lines:
            x = 72.0
            for index, part in enumerate(parts):
                raised = part == "\u00ae"
                canvas.setFont("Times-Roman", 6 if raised else 10)
                canvas.drawString(x, y + (4 if raised else 0), part)
                x += stringWidth(part, "Times-Roman", 6 if raised else 10)
                x += 0 if index + 1 < len(parts) and parts[index + 1] == "\u00ae" else 2.5  # the mark set close
            y -= 13

    markdown = markdown_of(draw)
    assert "|" not in markdown
    assert "Adobe\u00ae Portable Document Format" in markdown and "Acrobat Distiller\u00ae or" in markdown


def _table_rows(markdown: str) -> list[list[str]]:
    rows = [line for line in markdown.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_a_ruled_table_with_padded_rows_and_an_empty_cell_stays_one_table() -> None:
    rows = [("ACTION", "NAME", "DATE", "SIGNATURE"), ("WRITTEN BY", "Ada Guillon", "7 November 2020", ""),
            ("REVIEWED BY", "Bob Hoenen", "8 November 2020", "")]  # fmt: skip

    def draw(canvas: Any) -> None:  # dblatex's title page table: rows 44 pt apart, its signatures left blank
        y = 700
        for row in rows:
            canvas.setFont("Helvetica", 9)
            for x, text in zip((110, 207, 312, 464), row, strict=True):
                canvas.drawCentredString(x, y, text)
            y -= 44

    assert _table_rows(markdown_of(draw)) == [list(row) for row in rows]


def test_a_continuation_row_carrying_figures_stays_a_row() -> None:
    rows = [("Animal", "Description", "Price"), ("Gnat", "per gram", "13.65"), ("", "each", "0.01"),
            ("Gnu", "stuffed", "92.50"), ("Emu", "stuffed", "33.33")]  # fmt: skip

    def draw(canvas: Any) -> None:  # booktabs: no rules between the rows, the continuation's first cell empty
        y = 700
        for number, row in enumerate(rows):
            canvas.setFont("Times-Bold" if number == 0 else "Times-Roman", 10)
            canvas.drawString(72, y, row[0])
            canvas.drawString(150, y, row[1])
            canvas.drawRightString(300, y, row[2])
            y -= 12.5

    assert _table_rows(markdown_of(draw)) == [list(row) for row in rows]


def test_a_table_whose_cells_hold_code_is_a_table() -> None:
    rows = [("Option", "Syntax", "Meaning"), ("verbose", "-v, --verbose", "print each file"),
            ("output", "-o FILE", "write to FILE"), ("level", "--level=N", "compression level")]  # fmt: skip

    def draw(canvas: Any) -> None:  # a Sphinx option table: a bold header, the cells in a typewriter face
        y = 700
        for number, row in enumerate(rows):
            for x, text in zip((72, 180, 320), row, strict=True):
                canvas.setFont("Helvetica-Bold" if number == 0 else "Courier", 10)
                canvas.drawString(x, y, text)
            y -= 16

    assert _table_rows(markdown_of(draw)) == [list(row) for row in rows]
