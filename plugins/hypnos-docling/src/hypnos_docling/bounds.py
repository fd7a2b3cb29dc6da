"""Bounded decoding of a document before and while it converts: pixels, inflated bytes and time per page.

Every check parses the document's structure (a PDF's object model, an HTML's tree, a container's directory) and
decodes with the output thrown away, so a hostile file is refused before docling, pdfium or Pillow allocates what it
declares (limits.max_image_pixels, limits.max_document_inflated_bytes); pages rendered for OCR get the DPI that keeps
them under max_image_pixels.
"""

from __future__ import annotations

import io
import math
import time
import zipfile
from dataclasses import dataclass

from hypnos.errors import HypnosError, invalid_request
from hypnos.image_header import check_image_pixels

from hypnos_docling.html_bounds import check_html
from hypnos_docling.pdf_bounds import MAX_TEXT_OPERATORS, check_pdf

__all__ = ["MAX_TEXT_OPERATORS", "DocumentBounds"]

OCR_SCALE = 2.0  # 144 DPI: what a page without a text layer is rendered at when it fits
MIN_OCR_SCALE = 0.25  # 18 DPI: below it a page's text is no longer readable, so the page is refused instead
INFLATE_CHUNK = 1 << 20
_ZIP_IMAGE = (".png", ".jpg", ".jpeg", ".webp")


@dataclass(frozen=True)
class DocumentBounds:
    """The limits one conversion is held to (from [limits] and the model's [models.docling])."""

    max_image_pixels: int
    max_inflated_bytes: int
    page_timeout_secs: float

    @classmethod
    def defaults(cls, page_timeout_secs: float = 120.0) -> DocumentBounds:
        """The server's default [limits] (for a converter used without a server)."""
        from hypnos.config import LimitsConfig

        limits = LimitsConfig()
        return cls(limits.max_image_pixels, limits.max_document_inflated_bytes, page_timeout_secs)

    def check_document(self, kind: str, data: bytes) -> None:
        """400 before any conversion when the file declares an image or inflates beyond the limits."""
        if kind == "pdf":
            check_pdf(data, self.max_image_pixels, self.max_inflated_bytes)
        elif kind == "image":
            check_image_pixels(data, self.max_image_pixels, "the image")
        elif kind in ("docx", "pptx", "xlsx", "odt", "ods", "odp"):
            self._check_zip(data)
        elif kind == "html":
            check_html(data, self.max_image_pixels)

    def _check_inflated(self, inflated: int) -> None:
        if inflated > self.max_inflated_bytes:
            raise invalid_request(
                f"a stream of the document inflates to more than {self.max_inflated_bytes} bytes "
                "(limits.max_document_inflated_bytes)"
            )

    def _check_zip(self, data: bytes) -> None:
        """The container's members: their declared and actual inflated sizes, and their images' headers."""
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile:
            return  # detect_format has refused a damaged container already
        declared = sum(member.file_size for member in archive.infolist())
        if declared > self.max_inflated_bytes:
            raise invalid_request(
                f"the document's parts inflate to {declared} bytes, above limits.max_document_inflated_bytes "
                f"({self.max_inflated_bytes})"
            )
        for member in archive.infolist():
            with archive.open(member) as part:
                head = part.read(64 * 1024)
                inflated = len(head)
                while chunk := part.read(INFLATE_CHUNK):  # the sizes in the directory may lie
                    inflated += len(chunk)
                    self._check_inflated(inflated)
            if member.filename.lower().endswith(_ZIP_IMAGE):
                check_image_pixels(head, self.max_image_pixels, f"the image {member.filename[:80]}")

    def ocr_scale(self, page_no: int, width_pt: float, height_pt: float) -> float:
        """The render scale for OCR: 2 (144 DPI) when it fits max_image_pixels, lower when not; 400 past 18 DPI."""
        area = max(width_pt, 1.0) * max(height_pt, 1.0)
        scale = min(OCR_SCALE, math.sqrt(self.max_image_pixels / area))
        if scale < MIN_OCR_SCALE:
            raise invalid_request(
                f"page {page_no} is {width_pt:g}x{height_pt:g} pt: rendered for OCR at the lowest readable "
                f"resolution ({MIN_OCR_SCALE * 72:g} DPI) it is above limits.max_image_pixels ({self.max_image_pixels})"
            )
        return scale

    def check_page_time(self, page_no: int, started: float) -> None:
        """504 timeout when a page took longer than page_timeout_secs; the conversion stops there."""
        if time.perf_counter() - started > self.page_timeout_secs:
            raise HypnosError(
                504,
                "timeout",
                f"page {page_no} took longer than {self.page_timeout_secs:g} s to convert "
                "([models.docling] page_timeout_secs); the conversion stopped there",
            )
