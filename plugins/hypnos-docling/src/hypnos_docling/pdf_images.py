"""Embedded pictures docling-parse found but could not decode (e.g. a PNG with a soft mask, as Chromium writes them),
read from the PDF's image objects with pypdfium2: their own pixels, not a render of the page."""

from __future__ import annotations

from typing import Any

MAX_PIXELS = 40_000_000  # an embedded image above this is left without bytes rather than decoded


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    area = max((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]), 1e-6)
    return width * height / area


def fill_missing_images(pdf: Any, page_no: int, height: float, figures: list[Any]) -> None:
    """Give each figure without an image the pixels of the page's image object in the same place (in place); `pdf`
    is the document opened by pypdfium2 (None: the figures keep no bytes)."""
    missing = [figure for figure in figures if figure.image is None]
    if not missing or pdf is None:
        return
    import pypdfium2.raw as pdfium_c
    from docling_core.types.doc import ImageRef

    page = pdf[page_no - 1]
    try:
        objects = list(page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=4))
        for figure in missing:
            box = (figure.left, height - figure.bottom, figure.right, height - figure.top)  # bottom-left origin
            best = max(objects, key=lambda obj: _overlap(box, obj.get_bounds()), default=None)
            if best is None or _overlap(box, best.get_bounds()) < 0.5:
                continue
            width_px, height_px = best.get_px_size()
            if width_px * height_px > MAX_PIXELS:
                continue
            try:
                pil = best.get_bitmap(render=False).to_pil().convert("RGB")
            except Exception:  # a filter pdfium cannot decode: the picture keeps no bytes
                continue
            points = max(figure.right - figure.left, 1.0)
            figure.image = ImageRef.from_pil(pil, dpi=round(pil.width / points * 72))
    finally:
        page.close()
