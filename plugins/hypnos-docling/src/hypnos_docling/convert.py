"""The blocking conversion, run on the model's worker: detect the format, convert, hand out each page when done.

PDFs go through docling's threaded docling-parse backend page by page in one pass (the native pipeline's own
work, at its speed); pages without a text layer are read with RapidOCR. DOCX, PPTX, XLSX, ODT, ODS, ODP, HTML and
Markdown go through the declarative backends of docling's simple pipeline and come back as one page.
"""

from __future__ import annotations

import base64
import functools
import io
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypnos.engine import CancelToken, DocumentInput
from hypnos.errors import invalid_request
from hypnos.kit.staged import check_cancelled

from hypnos_docling.bounds import DocumentBounds
from hypnos_docling.events import DocumentStarted, PageDone, Picture
from hypnos_docling.formats import declarative_backend, detect_format
from hypnos_docling.html_clean import main_content
from hypnos_docling.layout import Figure, Line, page_document
from hypnos_docling.layout_furniture import FurnitureTracker, PageBands, bands_of
from hypnos_docling.layout_lines import segments_of_words
from hypnos_docling.layout_repeats import RepeatedHeadings
from hypnos_docling.md_text import markdown_of
from hypnos_docling.outline import OutlineGuide, read_outline
from hypnos_docling.pdf_cells import page_cells
from hypnos_docling.pdf_images import fill_missing_images
from hypnos_docling.pdf_rules import Rule, page_rules
from hypnos_docling.pdf_words import pdfium_text, split_glued

logger = logging.getLogger(__name__)


@dataclass
class ParsedPage:
    """A parsed PDF page waiting to be handed out: its text runs, pictures and the runs in its top/bottom bands."""

    number: int
    size: tuple[float, float]
    lines: list[Line]
    figures: list[Figure]
    ocr: bool
    bands: PageBands
    rules: Callable[[], list[Rule]] | None = None  # the page's ruling lines, read when the layout asks


def _png_of(image_ref: Any) -> tuple[bytes | None, int | None, int | None, int | None]:
    """PNG bytes, width, height and dpi of a docling ImageRef (None when it holds no image)."""
    if image_ref is None:
        return None, None, None, None
    uri = str(image_ref.uri)
    width, height = int(image_ref.size.width), int(image_ref.size.height)
    if uri.startswith("data:image/png;base64,"):
        return base64.b64decode(uri.split(",", 1)[1]), width, height, image_ref.dpi
    pil = image_ref.pil_image
    if pil is None:
        return None, width, height, image_ref.dpi
    out = io.BytesIO()
    pil.save(out, format="PNG")
    return out.getvalue(), width, height, image_ref.dpi


def pictures_of(doc: Any, page_no: int) -> list[Picture]:
    """The pictures of a docling document in markdown order, with their images and boxes (a picture the format
    places on no page, as in DOCX or HTML, has its own extent as its page: the box is the whole page)."""
    found = []
    for picture in doc.pictures:
        png, width, height, dpi = _png_of(picture.image)
        prov = picture.prov[0] if picture.prov else None
        page = doc.pages.get(prov.page_no) if prov is not None else None
        if prov is not None and page is not None:
            box = prov.bbox
            bbox = {"l": box.l, "t": box.t, "r": box.r, "b": box.b, "coord_origin": box.coord_origin.value}
            page_size = {"width": float(page.size.width), "height": float(page.size.height)}
        else:
            extent = {"width": float(width or 0), "height": float(height or 0)}
            if page is None and len(doc.pages) == 1:  # one page (a slide): the picture somewhere on it
                only = next(iter(doc.pages.values()))
                extent = {"width": float(only.size.width), "height": float(only.size.height)}
            bbox = {"l": 0.0, "t": 0.0, "r": extent["width"], "b": extent["height"], "coord_origin": "TOPLEFT"}
            page_size = extent
        caption = picture.caption_text(doc) or None
        found.append(
            Picture(page=page_no, png=png, width=width or 0, height=height or 0, dpi=dpi or 72, bbox=bbox,
                    page_size=page_size, caption=caption, ref=picture.self_ref)
        )  # fmt: skip
    return found


class Converter:
    """docling's backends and RapidOCR, built once per model at tier 1."""

    def __init__(self, threads: int, max_pages: int, bounds: DocumentBounds, standard: Any = None) -> None:
        self.threads = threads
        self.max_pages = max_pages
        self.bounds = bounds
        self.standard = standard  # docling's standard PDF pipeline (hypnos_docling.standard), None: the layout pass
        self._ocr: Any = None

    def ocr_lines(self, image: Any, scale: float) -> list[Line]:
        """The text lines RapidOCR reads in a PIL image, in the page's points (image pixels / scale)."""
        if self._ocr is None:
            from rapidocr import RapidOCR

            params = {"EngineConfig.onnxruntime.intra_op_num_threads": self.threads}
            self._ocr = RapidOCR(params=params)
        result = self._ocr(image)
        if result.boxes is None or result.txts is None:
            return []
        lines = []
        for box, text in zip(result.boxes, result.txts, strict=False):
            xs, ys = [float(point[0]) for point in box], [float(point[1]) for point in box]
            lines.append(Line(text, min(xs) / scale, min(ys) / scale, max(xs) / scale, max(ys) / scale))
        return lines

    def convert(self, job: DocumentInput, cancel: CancelToken, emit: Callable[[Any], None]) -> None:
        """Convert the document, calling emit(DocumentStarted) once and emit(PageDone) per page, in order."""
        kind = detect_format(job.data, job.filename)
        self.bounds.check_document(kind, job.data)
        if kind == "pdf" and self.standard is not None:
            page_count = _page_count(job.data)
            numbers = self._page_numbers(job, page_count)
            self.standard.convert(job, numbers, page_count, cancel, emit, pictures_of)
        elif kind == "pdf":
            self._convert_pdf(job, cancel, emit)
        elif kind == "image":
            self._convert_image(job, cancel, emit)
        else:
            self._convert_declarative(job, kind, cancel, emit)

    def _page_numbers(self, job: DocumentInput, page_count: int) -> list[int]:
        if page_count > self.max_pages:
            raise invalid_request(
                f"The document has {page_count} pages, above this model's max_pages ({self.max_pages})"
            )
        first, last = job.pages or (1, page_count)
        if first < 1 or first > last or first > page_count:
            raise invalid_request(f"Invalid value for `pages`: the document has {page_count} pages")
        return list(range(first, min(last, page_count) + 1))

    def _convert_pdf(self, job: DocumentInput, cancel: CancelToken, emit: Callable[[Any], None]) -> None:
        from docling.backend.docling_parse_backend import ThreadedDoclingParseDocumentBackend
        from docling.backend.pdf_backend import iter_pdf_page_backends
        from docling.datamodel.backend_options import ThreadedDoclingParseBackendOptions
        from docling.datamodel.base_models import InputFormat
        from docling.datamodel.document import InputDocument

        options = ThreadedDoclingParseBackendOptions(
            parser_threads=self.threads, include_bitmap_images=True, render_pages=False
        )
        name = job.filename or "document.pdf"
        source = InputDocument(
            io.BytesIO(job.data), InputFormat.PDF, ThreadedDoclingParseDocumentBackend,
            backend_options=options, filename=name,
        )  # fmt: skip
        if not source.valid or not source._backend.is_valid():
            raise invalid_request("The PDF could not be read (damaged or encrypted)")
        backend = source._backend
        pdfium = _open_pdfium(job.data)
        try:
            numbers = self._page_numbers(job, source.page_count)
            emit(DocumentStarted(page_count=source.page_count, pages=numbers, format="pdf"))
            parsed: dict[int, ParsedPage] = {}
            tracker = FurnitureTracker(numbers)
            outline = OutlineGuide(read_outline(pdfium))
            repeats = RepeatedHeadings()
            emitted = 0
            upcoming = iter(numbers)
            next_page = next(upcoming, None)
            started = time.perf_counter()
            pages = iter_pdf_page_backends(backend, numbers)
            try:
                for page_backend in pages:
                    if cancel.cancelled:
                        logger.info("conversion of %s cancelled after %d of %d pages", name, emitted, len(numbers))
                    check_cancelled(cancel)
                    page_started = time.perf_counter()  # the bound counts this page's own work, not the wait
                    try:
                        page = self._parse_pdf_page(job, page_backend, pdfium)
                    finally:
                        page_backend.unload()
                    self.bounds.check_page_time(page.number, page_started)
                    tracker.add(page.number, page.bands)
                    parsed[page.number] = page
                    while next_page in parsed and not tracker.undecided(next_page, parsed[next_page].bands):
                        emit(self._pdf_page_done(job, name, parsed.pop(next_page), tracker, outline, started, repeats))
                        emitted += 1
                        next_page = next(upcoming, None)
                        started = time.perf_counter()
                while next_page in parsed:  # every page parsed: the rest, in order
                    emit(self._pdf_page_done(job, name, parsed.pop(next_page), tracker, outline, started, repeats))
                    next_page = next(upcoming, None)
                    started = time.perf_counter()
            finally:
                pages.close()
        finally:
            backend.unload()
            if pdfium is not None:
                pdfium.close()

    def _parse_pdf_page(self, job: DocumentInput, page_backend: Any, pdfium: Any) -> ParsedPage:
        page_no = page_backend.page_no
        size = page_backend.get_size()
        width, height = float(size.width), float(size.height)
        lines: list[Line] = []
        figures: list[Figure] = []
        ocr = False
        if page_backend.is_valid():
            words, pictures = page_cells(page_backend, height)
            if words and pdfium is not None:
                words = split_glued(words, pdfium_text(pdfium, page_no, height))
            lines = segments_of_words(words)
            figures = [Figure(*box, image) for box, image in pictures]
        if not lines and job.ocr:
            scale = self.bounds.ocr_scale(page_no, width, height)
            image = self._render(pdfium, page_no, scale)
            lines = self.ocr_lines(image, scale) if _has_ink(image) else []  # a blank page: nothing to read
            ocr = bool(lines)
            if lines:  # a scan: the page-sized bitmap is the page itself, not a picture in it
                figures = [f for f in figures if (f.right - f.left) * (f.bottom - f.top) < 0.8 * width * height]
        fill_missing_images(pdfium, page_no, height, figures)
        rules = None if ocr or pdfium is None else functools.partial(page_rules, pdfium, page_no, height)
        return ParsedPage(page_no, (width, height), lines, figures, ocr, bands_of(lines, height), rules)

    def _pdf_page_done(
        self, job: DocumentInput, name: str, page: ParsedPage, tracker: FurnitureTracker, outline: OutlineGuide,
        started: float, repeats: RepeatedHeadings | None = None,
    ) -> PageDone:  # fmt: skip
        furniture = tracker.furniture(page.number, page.bands)
        lines = [line for line in page.lines if not any(line is other for other in furniture)]
        done = self._page_done(
            job, name, page.number, page.size, lines, page.figures, furniture, page.ocr, outline, page.rules, repeats
        )
        done.ms = round((time.perf_counter() - started) * 1000, 3)
        return done

    def _render(self, pdfium: Any, page_no: int, scale: float) -> Any:
        if pdfium is None:
            raise invalid_request(f"Page {page_no} could not be rendered for OCR")
        return pdfium[page_no - 1].render(scale=scale).to_pil()

    def _page_done(
        self, job: DocumentInput, name: str, page_no: int, size: tuple[float, float], lines: list[Line],
        figures: list[Figure], furniture: list[Line] | None = None, ocr: bool = False,
        outline: OutlineGuide | None = None, rules: Callable[[], list[Rule]] | None = None,
        repeats: RepeatedHeadings | None = None,
    ) -> PageDone:  # fmt: skip
        doc = page_document(name, page_no, size, lines, figures, furniture=furniture, ocr=ocr, outline=outline,
                            rules=rules, repeats=repeats)  # fmt: skip
        return PageDone(
            page=page_no,
            markdown=markdown_of(doc, page_no),
            tables=len(doc.tables),
            pictures=pictures_of(doc, page_no),
            ms=0.0,
            json=doc.export_to_dict() if job.output_format == "json" else None,
        )

    def _convert_image(self, job: DocumentInput, cancel: CancelToken, emit: Callable[[Any], None]) -> None:
        from docling_core.types.doc import ImageRef
        from PIL import Image, UnidentifiedImageError

        try:
            image = Image.open(io.BytesIO(job.data))
            image.load()
        except (UnidentifiedImageError, OSError):
            raise invalid_request("The image could not be decoded") from None
        self._page_numbers(job, 1)
        emit(DocumentStarted(page_count=1, pages=[1], format="image"))
        started = time.perf_counter()
        check_cancelled(cancel)
        rgb = image.convert("RGB")
        lines = self.ocr_lines(rgb, 1.0) if job.ocr else []
        width, height = float(rgb.width), float(rgb.height)
        figures = [] if lines else [Figure(0.0, 0.0, width, height, ImageRef.from_pil(rgb, dpi=72))]
        done = self._page_done(job, job.filename or "image", 1, (width, height), lines, figures, ocr=bool(lines))
        done.ms = round((time.perf_counter() - started) * 1000, 3)
        emit(done)

    def _convert_declarative(
        self, job: DocumentInput, kind: str, cancel: CancelToken, emit: Callable[[Any], None]
    ) -> None:
        from docling.datamodel.base_models import InputFormat
        from docling.datamodel.document import InputDocument

        backend_type, input_format = declarative_backend(kind, InputFormat)
        name = job.filename or f"document.{kind}"
        data = main_content(job.data) if kind == "html" else job.data
        source = InputDocument(io.BytesIO(data), input_format, backend_type, filename=name)
        if not source.valid or not source._backend.is_valid():
            raise invalid_request(f"The {kind.upper()} document could not be read")
        self._page_numbers(job, 1)
        emit(DocumentStarted(page_count=1, pages=[1], format=kind))
        started = time.perf_counter()
        check_cancelled(cancel)
        try:
            doc = source._backend.convert()
        except Exception as error:  # the library's text (paths, reprs) stays in the log
            logger.info("docling could not convert a %s document: %r", kind, error)
            raise invalid_request(f"The {kind.upper()} document could not be converted") from None
        finally:
            source._backend.unload()
        emit(
            PageDone(
                page=1,
                markdown=markdown_of(doc),
                tables=len(doc.tables),
                pictures=pictures_of(doc, 1),
                ms=round((time.perf_counter() - started) * 1000, 3),
                json=doc.export_to_dict() if job.output_format == "json" else None,
            )
        )


def _has_ink(image: Any) -> bool:
    """Whether a rendered page shows anything darker than its paper (a blank page took RapidOCR 10 s for nothing)."""
    low, high = image.convert("L").getextrema()
    return high - low > 32


def _page_count(data: bytes) -> int:
    """The PDF's page count (pypdfium2), 400 when it cannot be read."""
    pdf = _open_pdfium(data)
    if pdf is None:
        raise invalid_request("The PDF could not be read (damaged or encrypted)")
    try:
        return len(pdf)
    finally:
        pdf.close()


def _open_pdfium(data: bytes) -> Any:
    """The PDF opened by pypdfium2 for the conversion (page text, OCR renders, pictures), or None if it cannot."""
    import pypdfium2

    try:
        return pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError:
        return None
