"""What a CTranslate2 model.bin holds, read from its variable headers (the weights are skipped, never loaded)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

# CTranslate2's DataType enum, with each type's item size
FLOAT32, INT8, INT16, INT32, FLOAT16, BFLOAT16 = range(6)
ITEM_SIZE = {FLOAT32: 4, INT8: 1, INT16: 2, INT32: 4, FLOAT16: 2, BFLOAT16: 2}
FLOATS = frozenset({FLOAT32, FLOAT16, BFLOAT16})


def _read(handle: BinaryIO, fmt: str) -> int:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise ValueError("model.bin ends inside a header")
    return int(struct.unpack(fmt, data)[0])


def bytes_by_type(path: Path) -> dict[int, int] | None:
    """Stored bytes per data type over all variables; None for a format version this reader does not know (< 4)."""
    totals: dict[int, int] = {}
    with path.open("rb") as handle:
        version = _read(handle, "<I")
        if version < 4:
            return None
        handle.seek(_read(handle, "<H"), 1)  # the spec name
        handle.seek(4, 1)  # the spec revision
        for _ in range(_read(handle, "<I")):
            handle.seek(_read(handle, "<H"), 1)  # the variable name
            handle.seek(4 * _read(handle, "<B"), 1)  # its dimensions
            dtype = _read(handle, "<B")
            size = _read(handle, "<I")
            handle.seek(size, 1)
            totals[dtype] = totals.get(dtype, 0) + size
    return totals


def float_item_size(compute_type: str, device: str, stored: dict[int, int]) -> int | None:
    """The bytes per float weight once loaded for compute_type on device; None to keep each stored size."""
    if compute_type.startswith("int8"):
        return 1
    if compute_type in ("float16", "bfloat16", "int16"):
        return 2
    if compute_type == "float32":
        return 4
    # default / auto: half-precision weights are widened to float32 on a CPU without fast float16
    if device == "cpu" and (stored.get(FLOAT16) or stored.get(BFLOAT16)):
        return 4
    return None


def resident_bytes(path: Path, compute_type: str, device: str) -> int | None:
    """The weight bytes the model takes once loaded for compute_type on device; None when the header is unknown."""
    try:
        stored = bytes_by_type(path)
    except (OSError, ValueError, struct.error):
        return None
    if stored is None:
        return None
    item = float_item_size(compute_type, device, stored)
    total = 0
    for dtype, size in stored.items():
        if dtype in FLOATS and item is not None:
            total += size // ITEM_SIZE[dtype] * item
        else:
            total += size
    return total
