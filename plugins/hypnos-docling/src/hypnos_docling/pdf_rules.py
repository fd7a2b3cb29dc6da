"""Ruling lines drawn on a PDF page (a table's cell borders, its header rule), read from the page's path objects with
pdfium, only for a page whose layout asks for them (a row of two or more runs that could be a table's)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

MAX_OBJECTS = 20_000  # a page drawing more objects than this is a figure: its lines are no table's
THIN = 2.0  # a path this thin (points) is a line, not a shape
LONG = 6.0  # and this long at least


@dataclass(frozen=True)
class Rule:
    """A horizontal or vertical line in top-left page coordinates (points)."""

    left: float
    top: float
    right: float
    bottom: float

    @property
    def horizontal(self) -> bool:
        """Wider than tall."""
        return self.right - self.left >= self.bottom - self.top


def page_rules(pdf: Any, page_no: int, height: float) -> list[Rule]:
    """The page's thin straight paths: filled hairline boxes (LaTeX's rules, a browser's borders) and stroked lines
    (groff's and ReportLab's), by their bounds; nothing when the page cannot be read."""
    import pypdfium2.raw as pdfium_c

    page = pdf[page_no - 1]
    try:
        raw = page.raw
        count = pdfium_c.FPDFPage_CountObjects(raw)
        if count > MAX_OBJECTS:
            return []
        left, bottom, right, top = ctypes.c_float(), ctypes.c_float(), ctypes.c_float(), ctypes.c_float()
        refs = (ctypes.byref(left), ctypes.byref(bottom), ctypes.byref(right), ctypes.byref(top))
        rules = []
        for index in range(count):
            obj = pdfium_c.FPDFPage_GetObject(raw, index)
            if pdfium_c.FPDFPageObj_GetType(obj) != pdfium_c.FPDF_PAGEOBJ_PATH:
                continue
            if not pdfium_c.FPDFPageObj_GetBounds(obj, *refs):
                continue
            width, tall = right.value - left.value, top.value - bottom.value
            if (tall <= THIN and width >= LONG) or (width <= THIN and tall >= LONG):
                rules.append(Rule(left.value, height - top.value, right.value, height - bottom.value))
        return rules
    finally:
        page.close()
