"""A PDF stream's filter chain decoded as a stream of chunks: every stage's output is counted as it is made, so a
bomb at any depth of a chain (Flate in ASCIIHex in Flate ...) is stopped at the bound, never held whole.

The image codecs (DCT, JPX, CCITT, JBIG2) end a chain: what reaches them is the encoded picture, whose header the
caller reads. A filter this module does not know ends the chain too (pdfium cannot decode it either).
"""

from __future__ import annotations

import base64
import re
import zlib
from collections.abc import Iterable, Iterator

CHUNK = 1 << 20
MAX_FILTERS = 8  # a longer chain is refused: no real writer nests filters deeper
ABBREVIATIONS = {
    "/Fl": "/FlateDecode",
    "/AHx": "/ASCIIHexDecode",
    "/A85": "/ASCII85Decode",
    "/LZW": "/LZWDecode",
    "/RL": "/RunLengthDecode",
    "/CCF": "/CCITTFaxDecode",
    "/DCT": "/DCTDecode",
}
IMAGE_CODECS = frozenset({"/DCTDecode", "/JPXDecode", "/CCITTFaxDecode", "/JBIG2Decode"})
_NOT_HEX = bytes(byte for byte in range(256) if byte not in b"0123456789abcdefABCDEF")
_WHITESPACE = b" \t\r\n\f\0"
_A85_GROUPS = re.compile(rb"(?:z|[!-u]{5})*")


class TooLarge(Exception):
    """A stage of the chain produced more than the bound; `stage` names its filter."""

    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


def decode(raw: bytes, filters: list[str], limit: int) -> Iterator[bytes]:
    """The chunks the chain makes of `raw` up to its first image codec; TooLarge once any stage passes `limit`."""
    chunks: Iterator[bytes] = (raw[offset : offset + CHUNK] for offset in range(0, len(raw), CHUNK))
    for name in filters:
        name = ABBREVIATIONS.get(name, name)
        if name in IMAGE_CODECS:
            break
        stage = _STAGES.get(name)
        if stage is None:
            if name == "/Crypt":  # decrypted by the reader already
                continue
            return  # a filter pdfium does not know either: nothing decodes past it
        chunks = _counted(stage(chunks), limit, name)
    yield from chunks


def _counted(chunks: Iterator[bytes], limit: int, stage: str) -> Iterator[bytes]:
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise TooLarge(stage)
        yield chunk


def _flate(chunks: Iterable[bytes]) -> Iterator[bytes]:
    inflater = zlib.decompressobj()
    for chunk in chunks:
        data = chunk
        while data:
            try:
                out = inflater.decompress(data, CHUNK)
            except zlib.error:
                return  # damaged: pdfium keeps what decoded so far, and so does the count
            if out:
                yield out
            if inflater.eof:
                return
            data = inflater.unconsumed_tail
    try:
        tail = inflater.flush()
    except zlib.error:
        return
    if tail:
        yield tail


def _ascii_hex(chunks: Iterable[bytes]) -> Iterator[bytes]:
    carry = b""
    for chunk in chunks:
        end = chunk.find(b">")
        digits = carry + (chunk if end < 0 else chunk[:end]).translate(None, _NOT_HEX)
        whole = len(digits) // 2 * 2
        if whole:
            yield bytes.fromhex(digits[:whole].decode("ascii"))
        carry = digits[whole:]
        if end >= 0:
            break
    if carry:
        yield bytes.fromhex((carry + b"0").decode("ascii"))


def _ascii85(chunks: Iterable[bytes]) -> Iterator[bytes]:
    carry, first = b"", True
    for chunk in chunks:
        end = chunk.find(b"~>")
        data = carry + (chunk if end < 0 else chunk[:end]).translate(None, _WHITESPACE)
        if first and data.startswith(b"<~"):
            data = data[2:]
        first = False
        match = _A85_GROUPS.match(data)
        whole = match.end() if match is not None else 0
        if whole:
            yield base64.a85decode(data[:whole])
        carry = data[whole:]
        if len(carry) >= 5:  # a character that is no base-85 digit: the decoder stops there
            return
        if end >= 0:
            break
    if carry:
        try:
            yield base64.a85decode(carry)
        except ValueError:
            return


def _lzw(chunks: Iterable[bytes]) -> Iterator[bytes]:
    table = [bytes([code]) for code in range(256)] + [b"", b""]  # 256: clear, 257: end of data
    width, bits, held, previous, out = 9, 0, 0, b"", bytearray()
    for chunk in chunks:
        for byte in chunk:
            bits, held = (bits << 8) | byte, held + 8
            while held >= width:
                held -= width
                code = (bits >> held) & ((1 << width) - 1)
                bits &= (1 << held) - 1
                if code == 256:
                    del table[258:]
                    width, previous = 9, b""
                    continue
                if code == 257:
                    yield bytes(out)
                    return
                if code < len(table):
                    entry = table[code]
                    if previous and len(table) < 4096:
                        table.append(previous + entry[:1])
                elif code == len(table) and previous:
                    entry = previous + previous[:1]
                    table.append(entry)
                else:
                    yield bytes(out)
                    return
                out += entry
                previous = entry
                if len(table) + 1 >= 1 << width and width < 12:  # EarlyChange 1, the default
                    width += 1
            if len(out) >= CHUNK:
                yield bytes(out)
                out.clear()
    yield bytes(out)


def _run_length(chunks: Iterable[bytes]) -> Iterator[bytes]:
    carry = b""
    for chunk in chunks:
        data, at, out = carry + chunk, 0, bytearray()
        while at < len(data):
            length = data[at]
            if length == 128:
                yield bytes(out)
                return
            if length < 128:
                if at + length + 2 > len(data):
                    break
                out += data[at + 1 : at + length + 2]
                at += length + 2
            else:
                if at + 2 > len(data):
                    break
                out += data[at + 1 : at + 2] * (257 - length)
                at += 2
            if len(out) >= CHUNK:
                yield bytes(out)
                out.clear()
        carry = data[at:]
        yield bytes(out)


_STAGES = {
    "/FlateDecode": _flate,
    "/ASCIIHexDecode": _ascii_hex,
    "/ASCII85Decode": _ascii85,
    "/LZWDecode": _lzw,
    "/RunLengthDecode": _run_length,
}
