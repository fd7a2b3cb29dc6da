"""The `[models.docling]` table: how the docling engine runs."""

from __future__ import annotations

import msgspec


class DoclingOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Threads for the PDF parser and OCR, the page bound, and the default picture describer."""

    threads: int = 2
    max_pages: int = 2000
    page_timeout_secs: float = 120.0  # a page that takes longer stops the conversion with 504 timeout
    describe_model: str | None = None
    describe_prompt: str = "Describe this picture in one or two sentences."
