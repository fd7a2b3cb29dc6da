"""Hostile documents, generated: a giant page, a giant embedded image, a flate bomb, a page of 200k text operators;
the spellings a regex misses (inline images, indirect and signed sizes, `#`-escaped names, chained filters, a JPEG
with junk before its tables); and the measurement of one conversion in a fresh process (answer, RSS peak, seconds)."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import zlib

MiB = 1024 * 1024


def pdf(page_size: float, content: bytes, *, image: bytes | None = None, compress: bool = False) -> bytes:
    """A one-page PDF (Helvetica as /F1, optionally one image XObject /Im1) with a correct xref table."""
    stream_head = b"<< /Length %d" % len(content) + (b" /Filter /FlateDecode" if compress else b"") + b" >>"
    resources = b"<< /Font << /F1 4 0 R >>" + (b" /XObject << /Im1 6 0 R >>" if image else b"") + b" >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] /Resources %s /Contents 5 0 R >>"
        % (page_size, page_size, resources),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        stream_head + b"\nstream\n" + content + b"\nendstream",
    ]
    if image is not None:
        objects.append(image)
    return build(objects)


def giant_page(points: float) -> bytes:
    """A page of points x points with no text layer (what OCR would render whole)."""
    return pdf(points, b"0 0 0 rg 10 10 100 100 re f")


def _zeros_deflated(size: int) -> bytes:
    packer = zlib.compressobj(9)
    block = b"\0" * MiB
    chunks = [packer.compress(block) for _ in range(size // MiB)]
    return b"".join(chunks) + packer.flush()


def giant_image(side: int = 12000) -> bytes:
    """A page drawing one side x side RGB image whose compressed data is a few hundred KB of zeros."""
    data = _zeros_deflated(side * side * 3)
    image = (
        b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB /BitsPerComponent 8 "
        b"/Filter /FlateDecode /Length %d >>\nstream\n" % (side, side, len(data)) + data + b"\nendstream"
    )
    return pdf(612, b"q 500 0 0 500 50 50 cm /Im1 Do Q", image=image)


def flate_bomb(inflated: int = 600 * MiB) -> bytes:
    """A page whose content stream inflates to `inflated` bytes of whitespace."""
    packer = zlib.compressobj(9)
    block = b" " * MiB
    data = b"".join(packer.compress(block) for _ in range(inflated // MiB)) + packer.flush()
    return pdf(612, data, compress=True)


def text_operators(count: int = 200_000) -> bytes:
    """A page of `count` text-showing operators (one glyph each, placed on a grid)."""
    ops = [b"BT /F1 4 Tf"]
    for index in range(count):
        ops.append(b"1 0 0 1 %d %d Tm (x) Tj" % (10 + (index % 148) * 4, 10 + (index // 148) % 190 * 4))
    ops.append(b"ET")
    return pdf(612, b"\n".join(ops))


def build(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1, the first the catalog) with a correct xref table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def stream(entries: bytes, data: bytes) -> bytes:
    """A stream object's text: its dictionary entries, a correct /Length, the data."""
    return b"<< " + entries + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


ENCODERS = {
    b"/FlateDecode": lambda data: zlib.compress(data, 9),
    b"/ASCIIHexDecode": lambda data: data.hex().encode() + b">",
    b"/ASCII85Decode": lambda data: base64.a85encode(data) + b"~>",
    b"/RunLengthDecode": lambda data: (
        b"".join(bytes([len(data[at : at + 128]) - 1]) + data[at : at + 128] for at in range(0, len(data), 128))
        + b"\x80"
    ),
}


def encoded(data: bytes, filters: list[bytes]) -> tuple[bytes, bytes]:
    """The data encoded through the chain (the first filter decodes first) and its /Filter entry."""
    for name in reversed(filters):
        data = ENCODERS[name](data)
    return data, b"/Filter [" + b" ".join(filters) + b"]"


def one_page(content: bytes, *, xobject: bytes | None = None, extra: list[bytes] | None = None) -> bytes:
    """A 612 pt page whose content stream object is `content` (a whole stream object), /Im1 the optional image
    XObject (object 6), `extra` objects from 7 on (for indirect values)."""
    resources = b"<< /Font << /F1 4 0 R >>" + (b" /XObject << /Im1 6 0 R >>" if xobject else b"") + b" >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 612] /Resources %s /Contents 5 0 R >>" % resources,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        content,
        xobject or b"null",
        *(extra or []),
    ]
    return build(objects)


DRAW_IM1 = stream(b"", b"q 500 0 0 500 50 50 cm /Im1 Do Q")


def image_xobject(
    width: bytes, height: bytes, *, subtype: bytes = b"/Image", filters: bytes = b"/FlateDecode"
) -> bytes:
    """An image XObject declaring width x height as written (a number, `+N`, `7 0 R`), with a few bytes of data."""
    entries = b"/Type /XObject /Subtype %s /Width %s /Height %s /ColorSpace /DeviceGray /BitsPerComponent 8 /Filter %s"
    return stream(entries % (subtype, width, height, filters), zlib.compress(b"\0" * 4096))


def inline_image(side: int, *, key_w: bytes = b"/W", key_h: bytes = b"/H", spell: bytes = b"%d") -> bytes:
    """A page drawing an inline image that declares side x side (keys and number spelled as given)."""
    data = zlib.compress(b"\0" * 64)
    size = spell % side
    content = b"q 100 0 0 100 0 0 cm BI " + key_w + b" " + size + b" " + key_h + b" " + size
    content += b" /CS /G /BPC 8 /F /Fl ID " + data + b" EI Q"
    return one_page(stream(b"", content))


def indirect_size_image(side: int) -> bytes:
    """An image XObject whose /Width and /Height are `7 0 R` (object 7 holds side)."""
    return one_page(DRAW_IM1, xobject=image_xobject(b"7 0 R", b"7 0 R"), extra=[b"%d" % side])


def signed_size_image(side: int) -> bytes:
    """An image XObject whose size is written `+side`."""
    return one_page(DRAW_IM1, xobject=image_xobject(b"+%d" % side, b"+%d" % side))


def escaped_names_image(side: int) -> bytes:
    """An image XObject spelled /Im#61ge with its filter /#46lateDecode."""
    return one_page(
        DRAW_IM1, xobject=image_xobject(b"%d" % side, b"%d" % side, subtype=b"/Im#61ge", filters=b"/#46lateDecode")
    )


def chained_bomb(filters: list[bytes], inflated: int = 80 * MiB) -> bytes:
    """A content stream of `inflated` spaces behind a chain of filters (the last one Flate, the bomb)."""
    assert filters[-1] == b"/FlateDecode"
    packer = zlib.compressobj(9)
    flate = b"".join(packer.compress(b" " * MiB) for _ in range(inflated // MiB)) + packer.flush()
    data, _ = encoded(flate, filters[:-1])
    return one_page(stream(b"/Filter [" + b" ".join(filters) + b"]", data))


def encoded_text_operators(count: int, filters: list[bytes]) -> bytes:
    """text_operators' page with its content stream behind the filter chain."""
    ops = [b"BT /F1 4 Tf"] + [
        b"1 0 0 1 %d %d Tm (x) Tj" % (10 + i % 148 * 4, 10 + i // 148 % 190 * 4) for i in range(count)
    ]
    data, entry = encoded(b"\n".join([*ops, b"ET"]), filters)
    return one_page(stream(entry, data))


def jpeg_junk(width: int, height: int, junk: bytes = b"\x00") -> bytes:
    """A JPEG header (JFIF, then `junk` before its DQT, then its frame header declaring width x height)."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    dqt = b"\xff\xdb" + struct.pack(">H", 67) + b"\x00" + bytes(range(1, 65))
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + junk + dqt + sof + b"\xff\xd9"


def jpeg_xobject_page(side: int) -> bytes:
    """An image XObject declaring 10 x 10 whose DCT data (behind junk) is a side x side JPEG."""
    entries = b"/Type /XObject /Subtype /Image /Width 10 /Height 10 /ColorSpace /DeviceGray /BitsPerComponent 8"
    return one_page(DRAW_IM1, xobject=stream(entries + b" /Filter /DCTDecode", b"junk" + jpeg_junk(side, side)))


def png_header(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares width x height (its data is a few bytes)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))


MEASURE = """
import json, resource, sys, time
from hypnos.engine import CancelToken, DocumentInput
from hypnos.errors import HypnosError
from hypnos_docling.bounds import DocumentBounds
from hypnos_docling.convert import Converter
data = open(sys.argv[1], "rb").read()
bounds = DocumentBounds(max_image_pixels=int(sys.argv[2]), max_inflated_bytes=int(sys.argv[3]), page_timeout_secs=120)
converter = Converter(threads=2, max_pages=10, bounds=bounds)
import docling.backend.docling_parse_backend, rapidocr  # the libraries, loaded before the baseline
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
events, started, status = [], time.perf_counter(), 200
try:
    converter.convert(DocumentInput(data=data, filename="hostile.pdf"), CancelToken(), events.append)
except HypnosError as error:
    status = error.status
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"status": status, "peak_mib": peak / 1024, "baseline_mib": baseline / 1024,
                  "secs": time.perf_counter() - started, "pages": len(events) - 1}))
"""


def measure(path: str, max_image_pixels: int = 32 * MiB, max_inflated: int = 64 * MiB) -> dict[str, float]:
    """Convert the file at `path` in a fresh interpreter: status, peak and baseline RSS (MiB), seconds."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, path, str(max_image_pixels), str(max_inflated)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
