"""A parsed PDF page's words and embedded pictures, read from docling-parse's page with only what the layout needs.

docling's page backend materializes every word cell and every text line cell as pydantic models and moves them to
the top-left origin in place; the layout reads words only (text lines when a page has none): they are read from the
page decoder as they are, and only the pictures are materialized.
"""

from __future__ import annotations

from typing import Any

from hypnos_docling.layout_lines import Line

Box = tuple[float, float, float, float]


def top_left_box(rect: Any, height: float) -> Box:
    """A docling-parse rectangle as (left, top, right, bottom) from the page's top-left corner (what
    `rect.to_bounding_box().to_top_left_origin()` gives, without building two pydantic models a word)."""
    xs = (rect.r_x0, rect.r_x1, rect.r_x2, rect.r_x3)
    ys = (rect.r_y0, rect.r_y1, rect.r_y2, rect.r_y3)
    if rect.coord_origin.value == "BOTTOMLEFT":
        return min(xs), height - max(ys), max(xs), height - min(ys)
    return min(xs), min(ys), max(xs), max(ys)


def _config(*, words: bool, lines: bool) -> Any:
    """Pictures materialized, words or text lines too when asked, nothing else."""
    from docling_parse.pdf_parser import ContentConfig, ContentLevel

    keep, compute = ContentLevel.COMPUTE_AND_MATERIALIZE, ContentLevel.COMPUTE
    return ContentConfig(
        char_cells_content_level=compute,
        word_cells_content_level=keep if words else compute,
        line_cells_content_level=keep if lines else compute,
        shapes_content_level=ContentLevel.SKIP,
        bitmaps_content_level=keep,
        include_bitmap_bytes=True,
    )


def _raw_words(result: Any, height: float) -> list[Line] | None:
    """The words straight from docling-parse's page decoder (bottom-left corners), None where this docling-parse
    does not offer it: turning ~700 cells a page into pydantic models costs more than the whole layout pass."""
    decoder = getattr(result, "_page_decoder", None)
    if decoder is None or not hasattr(decoder, "get_word_cells"):
        return None
    if decoder.has_word_cells():
        cells = decoder.get_word_cells()
    elif decoder.has_line_cells():
        cells = decoder.get_line_cells()
    else:
        return []
    words = []
    for cell in cells:
        if cell.text.strip():
            xs, ys = (cell.r_x0, cell.r_x1, cell.r_x2, cell.r_x3), (cell.r_y0, cell.r_y1, cell.r_y2, cell.r_y3)
            words.append(
                Line(cell.text, min(xs), height - max(ys), max(xs), height - min(ys), cell.font_name or cell.font_key)
            )
    return words


def page_cells(page_backend: Any, height: float) -> tuple[list[Line], list[tuple[Box, Any]]]:
    """The page's words (its text lines when it has no words) and its pictures: (box, ImageRef or None)."""
    result = getattr(page_backend, "_result", None)
    if result is None or not hasattr(result, "get_page"):  # another backend: its own page, everything in it
        page = page_backend.get_segmented_page()
        cells = page.word_cells or page.textline_cells
    else:
        words = _raw_words(result, height)
        page = result.get_page(_config(words=words is None, lines=False))
        if words is not None:
            return words, [(top_left_box(bitmap.rect, height), bitmap.image) for bitmap in page.bitmap_resources]
        cells = page.word_cells or result.get_page(_config(words=False, lines=True)).textline_cells
    words = [
        Line(cell.text, *top_left_box(cell.rect, height), cell.font_name or cell.font_key or "")
        for cell in cells
        if cell.text.strip()
    ]
    return words, [(top_left_box(bitmap.rect, height), bitmap.image) for bitmap in page.bitmap_resources]
