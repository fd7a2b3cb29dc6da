"""Tables whose cells wrap, drawn with reportlab: where the PDF draws the cells (groff's `allbox`, ReportLab's GRID,
a browser's bordered cells) a cell's wrapped lines stay one cell of one row, and rules that make no grid (a rule
under a heading, a page's frame) change nothing; where blank lines part the rows (groff's tbl text blocks), the
lines between two blanks are one row."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from drawn_pdf import markdown_of
from test_layout_manuals import TEXT, _table_rows, _text

WINES = [
    (["Wine", "Colour", "Nose"], ["Wine", "Colour", "Nose"]),
    (["Peelee Island", "Gewurztraminer"], ["Pale yellow."], ["Fresh, fruity, lem-", "ony, tropical fruit."]),
    (["Carau Pujol"], ["Deep ruby,", "almost opaque."], ["Dark fruit."]),
]


def _grid(canvas: Any, xs: list[float], ys: list[float]) -> None:
    for x in xs:
        canvas.line(x, ys[0], x, ys[-1])
    for y in ys:
        canvas.line(xs[0], y, xs[-1], y)


def test_a_ruled_table_reads_cell_by_cell() -> None:
    xs, ys = [72.0, 160.0, 236.0, 340.0], [720.0, 702.0, 672.0, 642.0]

    def draw(canvas: Any) -> None:
        _text(canvas, 770, TEXT)
        _grid(canvas, xs, ys)
        canvas.setFont("Times-Bold", 10)
        for x, title in zip(xs, ["Wine", "Colour", "Nose"], strict=False):
            canvas.drawString(x + 4, 708, title)
        canvas.setFont("Times-Roman", 10)
        for top, cells in ((690.0, WINES[1]), (660.0, WINES[2])):
            for x, lines in zip(xs, cells, strict=False):
                for number, line in enumerate(lines):
                    canvas.drawString(x + 4, top - 12 * number, line)
        _text(canvas, 610, TEXT)

    rows = _table_rows(markdown_of(draw))
    assert rows == [
        ["Wine", "Colour", "Nose"],
        ["Peelee Island Gewurztraminer", "Pale yellow.", "Fresh, fruity, lemony, tropical fruit."],
        ["Carau Pujol", "Deep ruby, almost opaque.", "Dark fruit."],
    ]


def test_rules_that_make_no_grid_change_nothing() -> None:
    def draw(canvas: Any) -> None:
        canvas.setFont("Helvetica-Bold", 14)
        canvas.drawString(72, 770, "1 Introduction")
        canvas.line(72, 764, 520, 764)  # a rule under the heading
        canvas.rect(60, 60, 475, 730)  # the page's frame
        _text(canvas, 740, TEXT)

    markdown = markdown_of(draw)
    assert "|" not in markdown
    assert markdown.startswith("## 1 Introduction")


def test_rows_a_blank_apart_hold_their_cells_wrapped_lines() -> None:
    xs = [72.0, 160.0, 236.0]

    def draw(canvas: Any) -> None:  # groff's tasting notes: no rules, a blank line between rows
        _text(canvas, 770, TEXT)
        canvas.setFont("Helvetica-Bold", 10)
        for x, title in zip(xs, ["Wine", "Colour", "Nose"], strict=True):
            canvas.drawString(x, 720, title)
        canvas.setFont("Helvetica", 10)
        top = 700.0
        for cells in WINES[1:]:
            for x, lines in zip(xs, cells, strict=True):
                for number, line in enumerate(lines):
                    canvas.drawString(x, top - 12 * number, line)
            top -= 12 * max(len(lines) for lines in cells) + 12
        _text(canvas, top - 20, TEXT)

    rows = _table_rows(markdown_of(draw))
    assert rows == [
        ["Wine", "Colour", "Nose"],
        ["Peelee Island Gewurztraminer", "Pale yellow.", "Fresh, fruity, lemony, tropical fruit."],
        ["Carau Pujol", "Deep ruby, almost opaque.", "Dark fruit."],
    ]
