"""What the docling engine yields: the document's start, then one converted page at a time."""

from __future__ import annotations

from typing import Any

import msgspec


class Picture(msgspec.Struct, kw_only=True):
    """One picture of a page: image bytes (PNG) and where it sits."""

    page: int
    png: bytes | None
    width: int | None = None
    height: int | None = None
    dpi: int | None = None
    bbox: dict[str, Any] | None = None
    page_size: dict[str, float] | None = None
    caption: str | None = None
    ref: str | None = None


class DocumentStarted(msgspec.Struct, kw_only=True):
    """The document was read: its page count and the page numbers that will follow."""

    page_count: int
    pages: list[int]
    format: str


class PageDone(msgspec.Struct, kw_only=True):
    """One converted page: its markdown, docling JSON (when asked), pictures and tables."""

    page: int
    markdown: str
    tables: int
    pictures: list[Picture]
    ms: float
    json: dict[str, Any] | None = None
