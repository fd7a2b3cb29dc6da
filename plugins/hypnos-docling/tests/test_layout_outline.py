"""A PDF's own outline (bookmarks) as evidence for its headings, drawn with reportlab: a row the outline names is a
heading at the outline's level whatever its face; a row styled as the outlined headings that the outline leaves out
is text (a slide's title on its next build); one set smaller than every outlined heading lies below the outline's
depth and stays a heading; without an outline the typography decides alone."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from drawn_pdf import markdown_of
from test_layout_manuals import TEXT, _text


def _headings(markdown: str) -> list[str]:
    return [line.strip() for line in markdown.splitlines() if line.startswith("#")]


def _mark(canvas: Any, title: str, level: int) -> None:
    key = f"k{id(title)}{title}"
    canvas.bookmarkPage(key)
    canvas.addOutlineEntry(title, key, level=level)


def _chapter(canvas: Any, y: float, title: str, *, outlined: bool = True, level: int = 0) -> float:
    canvas.setFont("Helvetica-Bold", 14)
    canvas.drawString(72, y, title)
    if outlined:
        _mark(canvas, title, level)
    return _text(canvas, y - 22, TEXT) - 14


def test_a_row_the_outline_names_is_a_heading_at_its_level_whatever_its_face() -> None:
    def draw(canvas: Any) -> None:
        y = _chapter(canvas, 770, "1 Introduction")
        canvas.setFont("Times-Roman", 10)  # texinfo's @heading set in the body's face, bookmarked all the same
        canvas.drawString(72, y, "Obtaining the sources")
        _mark(canvas, "Obtaining the sources", 1)
        y = _text(canvas, y - 16, TEXT) - 14
        canvas.setFont("Helvetica-Bold", 11)
        canvas.drawString(72, y, "Appendix")
        _mark(canvas, "Appendix", 0)
        _text(canvas, y - 16, TEXT)

    headings = _headings(markdown_of(draw))
    assert headings == ["## 1 Introduction", "### Obtaining the sources", "## Appendix"]


def test_a_heading_the_outline_leaves_out_is_text_unless_below_its_depth() -> None:
    def draw(canvas: Any) -> None:
        y = _chapter(canvas, 770, "1 Slides")
        y = _chapter(canvas, y, "2 Pauses and transitions")
        canvas.setFont("Helvetica-Bold", 10.5)  # a subheading smaller than any outlined heading: below the depth
        canvas.drawString(72, y, "Options")
        _text(canvas, y - 16, TEXT)
        canvas.showPage()
        y = _chapter(canvas, 770, "2 Pauses and transitions", outlined=False)  # the slide's next build
        _text(canvas, y, TEXT)

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["## 1 Slides", "## 2 Pauses and transitions", "#### Options"]
    assert markdown.count("2 Pauses and transitions") == 2


def test_without_an_outline_the_typography_decides() -> None:
    def draw(canvas: Any) -> None:
        y = _chapter(canvas, 770, "1 Slides", outlined=False)
        _chapter(canvas, y, "2 Pauses and transitions", outlined=False)

    assert _headings(markdown_of(draw)) == ["## 1 Slides", "## 2 Pauses and transitions"]
