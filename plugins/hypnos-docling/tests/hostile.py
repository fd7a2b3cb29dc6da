"""Hostile documents, generated: a giant page, a giant embedded image, a flate bomb, a page of 200k text operators;
and the measurement of one conversion in a fresh process (answer, RSS peak, seconds)."""

from __future__ import annotations

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
