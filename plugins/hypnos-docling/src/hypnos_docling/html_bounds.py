"""An HTML document bounded by a parse before docling reads it: nesting depth, element count, embedded images.

docling's HTML backend walks the tree recursively and spends time that grows with depth x size (a 1.1 MB page of
nested divs held it for 316 s), so a page nested deeper than MAX_HTML_DEPTH or holding more than MAX_HTML_ELEMENTS
elements is refused with 400 before conversion; every `data:image/...;base64` URL in an attribute is checked from
its header against max_image_pixels.
"""

from __future__ import annotations

import base64
import binascii
from html.parser import HTMLParser

from hypnos.errors import invalid_request
from hypnos.image_header import check_image_pixels

MAX_HTML_DEPTH = 256  # real pages nest a few dozen elements deep
MAX_HTML_ELEMENTS = 200_000
FEED_CHUNK = 1 << 16
# elements without content, and those whose end tag the HTML parser infers (never counted as nesting)
_VOID = frozenset(
    "area base br col embed hr img input link meta param source track wbr "
    "p li dt dd tr td th thead tbody tfoot option optgroup rb rt rp colgroup caption".split()
)
_IMAGE_HEAD_CHARS = 512  # base64 characters decoded for an embedded image's header


class _Bounded(HTMLParser):
    def __init__(self, max_pixels: int) -> None:
        super().__init__(convert_charrefs=False)
        self.max_pixels = max_pixels
        self.open: list[str] = []
        self.elements = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements += 1
        if self.elements > MAX_HTML_ELEMENTS:
            raise invalid_request(f"the HTML holds more than {MAX_HTML_ELEMENTS} elements; split the document")
        for _, value in attrs:
            if value and value[:11].lower() == "data:image/":
                _check_data_url(value, self.max_pixels)
        if tag in _VOID:
            return
        self.open.append(tag)
        if len(self.open) > MAX_HTML_DEPTH:
            raise invalid_request(
                f"the HTML nests elements more than {MAX_HTML_DEPTH} deep; flatten or split the document"
            )

    def handle_endtag(self, tag: str) -> None:
        if tag in self.open:
            while self.open and self.open.pop() != tag:
                pass


def _check_data_url(value: str, max_pixels: int) -> None:
    comma = value.find(",")
    if comma < 0 or ";base64" not in value[:comma].lower():
        return
    head = "".join(value[comma + 1 : comma + 1 + _IMAGE_HEAD_CHARS * 2].split())[:_IMAGE_HEAD_CHARS]
    try:
        data = base64.b64decode(head[: len(head) // 4 * 4])
    except (binascii.Error, ValueError):
        return
    check_image_pixels(data, max_pixels, "an image in the document")


def check_html(data: bytes, max_pixels: int) -> None:
    """400 when the page nests too deep, holds too many elements, or embeds an image above max_pixels."""
    parser = _Bounded(max_pixels)
    text = data.decode("utf-8", errors="replace")
    for offset in range(0, len(text), FEED_CHUNK):
        parser.feed(text[offset : offset + FEED_CHUNK])
    parser.close()
