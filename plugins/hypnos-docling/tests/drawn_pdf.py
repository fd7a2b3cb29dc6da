"""PDFs drawn line by line on a reportlab canvas and converted by the engine's converter (no server): the layout
cases of real manuals, reproduced."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any


def convert_drawn(draw: Callable[[Any], None], *, json: bool = False) -> tuple[str, list[Any]]:
    """(joined Markdown, PageDone records) of the PDF `draw` makes on a reportlab canvas (A4, reportlab's default)."""
    from hypnos.engine import CancelToken, DocumentInput
    from hypnos_docling.bounds import DocumentBounds
    from hypnos_docling.convert import Converter
    from hypnos_docling.events import PageDone
    from hypnos_docling.markdown import join_pages
    from reportlab.pdfgen.canvas import Canvas

    out = io.BytesIO()
    canvas = Canvas(out)
    draw(canvas)
    canvas.save()
    pages: list[PageDone] = []
    job = DocumentInput(data=out.getvalue(), filename="drawn.pdf", output_format="json" if json else "markdown")
    Converter(threads=1, max_pages=10, bounds=DocumentBounds.defaults()).convert(
        job, CancelToken(), lambda e: pages.append(e) if isinstance(e, PageDone) else None
    )
    return join_pages([page.markdown for page in pages]), pages


def markdown_of(draw: Callable[[Any], None]) -> str:
    """The joined Markdown of the PDF `draw` makes."""
    return convert_drawn(draw)[0]


def write_words(canvas: Any, x: float, y: float, words: list[str], font: str, size: float, gap: float) -> float:
    """Each word drawn on its own, `gap` points after the previous one (TeX's interword glue: no space glyph);
    the x after the last word."""
    from reportlab.pdfbase.pdfmetrics import stringWidth

    canvas.setFont(font, size)
    for word in words:
        canvas.drawString(x, y, word)
        x += stringWidth(word, font, size) + gap
    return x
