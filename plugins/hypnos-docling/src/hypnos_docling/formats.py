"""Which format a document is in (its bytes first, its filename's extension second) and docling's backend for it."""

from __future__ import annotations

import io
import zipfile
from typing import Any

from hypnos.errors import invalid_request

EXTENSIONS = {
    "pdf": "pdf", "docx": "docx", "pptx": "pptx", "xlsx": "xlsx", "odt": "odt", "ods": "ods", "odp": "odp",
    "html": "html", "htm": "html", "md": "md", "markdown": "md", "png": "image", "jpg": "image", "jpeg": "image",
}  # fmt: skip
_OPENDOCUMENT = {
    b"application/vnd.oasis.opendocument.text": "odt",
    b"application/vnd.oasis.opendocument.spreadsheet": "ods",
    b"application/vnd.oasis.opendocument.presentation": "odp",
}


def detect_format(data: bytes, filename: str | None) -> str:
    """pdf, docx, pptx, xlsx, odt, ods, odp, html, md or image, from the bytes first and the extension second; 400
    otherwise."""
    if data.startswith(b"%PDF"):
        return "pdf"
    if data.startswith(b"PK"):
        return _container_format(data)
    if data.startswith((b"\x89PNG", b"\xff\xd8\xff")):
        return "image"
    extension = (filename or "").rsplit(".", 1)[-1].lower() if "." in (filename or "") else ""
    if extension in EXTENSIONS and EXTENSIONS[extension] != "pdf":
        return EXTENSIONS[extension]
    head = data[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if extension == "pdf":
        raise invalid_request("The document is not a valid PDF (no %PDF header)")
    raise invalid_request(
        "Unsupported document format; send a PDF, DOCX, PPTX, XLSX, ODT, ODS, ODP, HTML, Markdown, PNG or JPEG "
        "(the filename's extension helps detect it)"
    )


def _container_format(data: bytes) -> str:
    """docx, pptx or xlsx by the parts an Office container holds, odt, ods or odp by an OpenDocument's mimetype."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
        mimetype = b""
        if "mimetype" in names:
            with archive.open("mimetype") as part:  # a few bytes, never the whole part
                mimetype = part.read(100).strip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, ValueError, OSError):
        raise invalid_request("The document is a damaged ZIP container (DOCX/PPTX/XLSX/ODT/ODS/ODP)") from None
    if mimetype in _OPENDOCUMENT:
        return _OPENDOCUMENT[mimetype]
    for prefix, kind in (("word/", "docx"), ("ppt/", "pptx"), ("xl/", "xlsx")):
        if any(name.startswith(prefix) for name in names):
            return kind
    raise invalid_request("Unsupported document format: a ZIP file that is not DOCX, PPTX, XLSX, ODT, ODS or ODP")


def declarative_backend(kind: str, formats: Any) -> tuple[Any, Any]:
    """docling's backend class and InputFormat for a format read by its simple pipeline."""
    if kind == "docx":
        from docling.backend.msword_backend import MsWordDocumentBackend

        return MsWordDocumentBackend, formats.DOCX
    if kind == "pptx":
        from docling.backend.mspowerpoint_backend import MsPowerpointDocumentBackend

        return MsPowerpointDocumentBackend, formats.PPTX
    if kind == "xlsx":
        from docling.backend.msexcel_backend import MsExcelDocumentBackend

        return MsExcelDocumentBackend, formats.XLSX
    if kind in ("odt", "ods", "odp"):
        from docling.backend import opendocument_backend

        backend = {"odt": "OdtDocumentBackend", "ods": "OdsDocumentBackend", "odp": "OdpDocumentBackend"}[kind]
        return getattr(opendocument_backend, backend), getattr(formats, kind.upper())
    if kind == "html":
        from docling.backend.html_backend import HTMLDocumentBackend

        return HTMLDocumentBackend, formats.HTML
    from docling.backend.md_backend import MarkdownDocumentBackend

    return MarkdownDocumentBackend, formats.MD
