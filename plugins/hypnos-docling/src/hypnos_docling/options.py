"""The `[models.docling]` table: how the docling engine runs."""

from __future__ import annotations

from typing import Literal

import msgspec


class DoclingOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Threads for the PDF parser and OCR, the page bound, the PDF pipeline, and the default picture describer."""

    threads: int | None = None  # parser and OCR threads; unset: the cores the engine host may run on
    max_pages: int = 2000
    page_timeout_secs: float = 120.0  # a page that takes longer stops the conversion with 504 timeout
    # PDFs: "layout" (the plugin's layout pass on docling-parse's words) or "standard" (docling's layout model and
    # TableFormer from `artifacts_path`); unset: "standard" when the model's folder holds docling's layout artifacts
    pipeline: Literal["layout", "standard"] | None = None
    artifacts_path: str | None = None  # docling's model artifacts (relative paths: under models_dir)
    describe_model: str | None = None
    describe_prompt: str = "Describe this picture in one or two sentences."
