"""A PDF bounded through its object model (pypdf), before pdfium or docling-parse decode anything.

Every object of the cross-reference table is read as pypdf parses it (indirect values resolved, `#`-escaped names
decoded, `+20000` a number), so no spelling of a dictionary gets past: each image XObject's /Width x /Height and the
header of its JPEG or JPEG 2000 data against max_image_pixels; each stream's whole filter chain decoded a chunk at a
time (stream_filters), every stage counted against max_document_inflated_bytes; and every decoded stream scanned for
inline images (`BI /W .. /H .. ID`) and text-showing operators (per page, over all its content streams).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

from hypnos.errors import invalid_request
from hypnos.image_header import check_pixel_count, image_size

from hypnos_docling.stream_filters import ABBREVIATIONS, MAX_FILTERS, TooLarge, decode

# Text-showing operators one page's content may hold: a dense real page has a few thousand; docling-parse spends
# minutes and a GiB on 200k (measured), and cannot be interrupted mid-page, so such a page is refused up front.
MAX_TEXT_OPERATORS = 20_000
MAX_INLINE_DICT = 1 << 20  # an inline image's dictionary longer than this is refused (a real one has a few keys)
HEADER_BYTES = 64 * 1024  # what of an image codec's data is read for its header
_TEXT_OPERATOR = re.compile(rb"(?<![A-Za-z])T[jJ](?![A-Za-z])")
_INLINE_START = re.compile(rb"(?:^|(?<=[\s\]\[>)}]))BI(?=[\s/])")  # candidates; each one is parsed as a dictionary
_DELIMITERS = b"()<>[]{}/%"
_WHITESPACE = b" \t\r\n\f\0"
_NUMBER = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)")
_WIDTH_KEYS, _HEIGHT_KEYS = ("/W", "/Width"), ("/H", "/Height")


def check_pdf(data: bytes, max_pixels: int, max_inflated: int) -> None:
    """400 when any object of the PDF declares an image above max_pixels, a stream decodes past max_inflated at any
    stage of its filter chain, or a page shows more than MAX_TEXT_OPERATORS; 400 too for a PDF pypdf cannot read."""
    from pypdf import apply_configuration

    bounds: dict[str, Any] = {  # pypdf's own bounds on what it decodes (object and cross-reference streams)
        f"{name}_maximum_output_length": max_inflated for name in ("zlib", "lzw", "run_length", "array_based_stream")
    }
    with apply_configuration(maximum_declared_stream_length=max(len(data), 1), **bounds):
        reader = _reader(data)
        try:
            operators: dict[int, int] = {}
            for number, generation in _object_numbers(reader):
                stream = _stream(reader, number, generation)
                if stream is not None:
                    operators[number] = _check_stream(stream, max_pixels, max_inflated)
            pages = list(_page_contents(reader))
        except Exception as error:  # pypdf gave up on the file's structure (a loop, a bound): unreadable, the client's
            if getattr(error, "status", None) == 400:
                raise
            raise invalid_request(f"the PDF could not be read ({type(error).__name__}: {str(error)[:160]})") from None
        for page_no, contents in pages:
            count = sum(operators.get(number, 0) for number in contents)
            if count > MAX_TEXT_OPERATORS:
                raise invalid_request(
                    f"page {page_no} has {count} text operators, more than {MAX_TEXT_OPERATORS}; split the document "
                    "or send the page as an image"
                )


def _reader(data: bytes) -> Any:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise invalid_request("the PDF is encrypted with a password; send it decrypted")
        return reader
    except Exception as error:
        if getattr(error, "status", None) == 400:
            raise
        raise invalid_request(f"the PDF could not be read ({type(error).__name__}: {str(error)[:160]})") from None


def _object_numbers(reader: Any) -> Iterator[tuple[int, int]]:
    for generation, table in list(reader.xref.items()):
        for number in list(table):
            yield number, generation


def _stream(reader: Any, number: int, generation: int) -> Any:
    from pypdf.errors import LimitReachedError
    from pypdf.generic import IndirectObject, StreamObject

    try:
        value = reader.get_object(IndirectObject(number, generation, reader))
    except LimitReachedError as error:
        raise invalid_request(f"an object of the PDF decodes past its bound ({str(error)[:160]})") from None
    except Exception:
        return None  # an object pypdf cannot parse: pdfium cannot use it either
    return value if isinstance(value, StreamObject) else None


def _resolved(value: Any) -> Any:
    for _ in range(8):
        if not hasattr(value, "get_object"):
            return value
        target = value.get_object()
        if target is value:
            return value
        value = target
    return None


def _number(value: Any) -> int:
    value = _resolved(value)
    try:
        return int(float(value)) if value is not None and not isinstance(value, (str, bytes)) else 0
    except (TypeError, ValueError):
        return 0


def _filters(stream: Any) -> list[str]:
    value = _resolved(stream.get("/Filter"))
    names = value if isinstance(value, list) else [value] if value is not None else []
    filters = [str(_resolved(name)) for name in names]
    if len(filters) > MAX_FILTERS:
        raise invalid_request(f"a stream of the PDF has {len(filters)} filters, more than {MAX_FILTERS}")
    return filters


def _check_stream(stream: Any, max_pixels: int, max_inflated: int) -> int:
    """The stream's checks; the text operators it shows."""
    filters = _filters(stream)
    image = str(_resolved(stream.get("/Subtype"))) == "/Image"
    if image:
        width = _number(stream.get("/Width"))
        height = _number(stream.get("/Height"))
        check_pixel_count(width, height, max_pixels, "an image in the document")
    codec = next((ABBREVIATIONS.get(name, name) for name in filters if ABBREVIATIONS.get(name, name) in _CODECS), None)
    raw = stream._data if isinstance(stream._data, bytes) else bytes(stream._data)
    scanner = _ContentScanner(max_pixels)
    head = bytearray()
    try:
        for chunk in decode(raw, filters, max_inflated):
            if codec is not None:
                if len(head) < HEADER_BYTES:
                    head += chunk[: HEADER_BYTES - len(head)]
            elif not image:
                scanner.feed(chunk)
    except TooLarge as error:
        raise invalid_request(
            f"a stream of the document decodes past {max_inflated} bytes at its {error.stage[1:]} stage "
            "(limits.max_document_inflated_bytes)"
        ) from None
    if codec == "/DCTDecode":  # pdfium looks for the JPEG's start past any junk before it
        head = head[max(0, head.find(b"\xff\xd8")) :]
    if codec in ("/DCTDecode", "/JPXDecode") and (size := image_size(bytes(head))) is not None:
        check_pixel_count(size[0], size[1], max_pixels, "an image in the document")
    return scanner.operators


_CODECS = frozenset({"/DCTDecode", "/JPXDecode", "/CCITTFaxDecode", "/JBIG2Decode"})


def _page_contents(reader: Any) -> Iterator[tuple[int, list[int]]]:
    try:
        pages = list(reader.pages)
    except Exception as error:
        raise invalid_request(f"the PDF's page tree could not be read ({type(error).__name__})") from None
    for page_no, page in enumerate(pages, start=1):
        contents = page.get("/Contents") if hasattr(page, "get") else None
        if hasattr(contents, "idnum"):
            resolved = _resolved(contents)
            contents = resolved if isinstance(resolved, list) else [contents]
        numbers = (
            [item.idnum for item in contents or [] if hasattr(item, "idnum")] if isinstance(contents, list) else []
        )
        yield page_no, numbers


class _ContentScanner:
    """A decoded stream read as content: text operators counted, every inline image's dictionary parsed."""

    def __init__(self, max_pixels: int) -> None:
        self.max_pixels = max_pixels
        self.operators = 0
        self._tail = b""  # the end of the last chunk: an operator or an inline dictionary cut by the chunking

    def feed(self, chunk: bytes) -> None:
        """Scan one decoded chunk."""
        data = self._tail + chunk
        self.operators += len(_TEXT_OPERATOR.findall(data, len(self._tail) and len(self._tail) - 1))
        carry_from = max(0, len(data) - 1)
        for match in _INLINE_START.finditer(data):
            size = _inline_size(data, match.end())
            if size is _INCOMPLETE:  # the dictionary goes on in the next chunk
                carry_from = min(carry_from, match.start())
                break
            if isinstance(size, tuple):
                check_pixel_count(size[0], size[1], self.max_pixels, "an inline image in the document")
        self._tail = data[carry_from:]
        if len(self._tail) > MAX_INLINE_DICT:
            raise invalid_request(f"an inline image's dictionary runs past {MAX_INLINE_DICT} bytes")


_INCOMPLETE = object()
_VALUE_KEYWORDS = frozenset({"true", "false", "null"})


def _inline_size(data: bytes, at: int) -> tuple[int, int] | object | None:
    """The largest width and height an inline image's dictionary (after BI, up to ID) declares; _INCOMPLETE when
    the dictionary does not end within `data`; None when what follows BI is no dictionary (a BI in binary data)."""
    widths, heights, key = [0], [0], None
    while True:
        at = _skip_space(data, at)
        if at >= len(data):
            return _INCOMPLETE
        if key is None and data.startswith(b"ID", at) and (at + 2 == len(data) or data[at + 2] in _WHITESPACE):
            return max(widths), max(heights)
        token, at = _token(data, at)
        if token is _INCOMPLETE:
            return _INCOMPLETE
        if key is None:
            if not (isinstance(token, str) and token.startswith("/")):
                return None
            key = token
            continue
        if isinstance(token, str) and token and not token.startswith("/") and token not in _VALUE_KEYWORDS:
            return None  # an operator where a value belongs: not an inline image's dictionary
        name = ABBREVIATIONS.get(key, key)
        if name in _WIDTH_KEYS and isinstance(token, int):
            widths.append(token)
        elif name in _HEIGHT_KEYS and isinstance(token, int):
            heights.append(token)
        key = None


def _skip_space(data: bytes, at: int) -> int:
    while at < len(data):
        if data[at] in _WHITESPACE:
            at += 1
        elif data[at] == 0x25:  # % comment to the end of the line
            end = min((i for i in (data.find(b"\n", at), data.find(b"\r", at)) if i >= 0), default=len(data))
            at = end + 1
        else:
            break
    return at


def _token(data: bytes, at: int) -> tuple[Any, int]:
    """One value of an inline dictionary: a name (escapes decoded), a number, "" for an array, string or dictionary
    (skipped whole), or a keyword; _INCOMPLETE when it runs to the end of `data`."""
    first = data[at]
    if first == 0x2F:  # /name
        end = at + 1
        while end < len(data) and data[end] not in _WHITESPACE and data[end] not in _DELIMITERS:
            end += 1
        if end >= len(data):
            return _INCOMPLETE, end
        return "/" + _unescape(data[at + 1 : end]), end
    number = _NUMBER.match(data, at)
    if number is not None:
        if number.end() >= len(data):
            return _INCOMPLETE, number.end()
        return int(float(number.group())), number.end()
    for opening, closing in ((b"<<", b">>"), (b"[", b"]"), (b"(", b")"), (b"<", b">")):
        if data.startswith(opening, at):
            end = data.find(closing, at + len(opening))
            return (_INCOMPLETE, len(data)) if end < 0 else ("", end + len(closing))
    end = at + 1
    while end < len(data) and data[end] not in _WHITESPACE and data[end] not in _DELIMITERS:
        end += 1
    if end >= len(data):
        return _INCOMPLETE, end
    return data[at:end].decode("latin-1"), end


def _unescape(name: bytes) -> str:
    return re.sub(rb"#([0-9A-Fa-f]{2})", lambda match: bytes([int(match.group(1), 16)]), name).decode("latin-1")
