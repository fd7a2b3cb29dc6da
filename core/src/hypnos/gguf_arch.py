"""Reads a GGUF file's `general.architecture` from its header alone (no weights, no llama.cpp)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

_MAGIC = b"GGUF"
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # scalar type -> byte size
_STRING, _ARRAY = 8, 9
_MAX_KEYS = 100_000


class GgufHeaderError(ValueError):
    """The file is not a GGUF, or its header is cut short."""


def _read(handle: BinaryIO, size: int) -> bytes:
    data = handle.read(size)
    if len(data) != size:
        raise GgufHeaderError("the GGUF header is cut short")
    return data


def _u64(handle: BinaryIO) -> int:
    return int(struct.unpack("<Q", _read(handle, 8))[0])


def _skip_value(handle: BinaryIO, kind: int) -> None:
    if kind in _FIXED:
        handle.seek(_FIXED[kind], 1)
    elif kind == _STRING:
        handle.seek(_u64(handle), 1)
    elif kind == _ARRAY:
        item = int(struct.unpack("<I", _read(handle, 4))[0])
        count = _u64(handle)
        if item in _FIXED:
            handle.seek(_FIXED[item] * count, 1)
        else:
            for _ in range(count):
                _skip_value(handle, item)
    else:
        raise GgufHeaderError(f"unknown GGUF value type {kind}")


def gguf_architecture(path: str | Path) -> str | None:
    """The file's general.architecture (None when the header has none); GgufHeaderError for a non-GGUF file."""
    with open(path, "rb") as handle:
        if _read(handle, 4) != _MAGIC:
            raise GgufHeaderError(f"{path} is not a GGUF file")
        version = int(struct.unpack("<I", _read(handle, 4))[0])
        if version < 2:
            raise GgufHeaderError(f"GGUF version {version} is not supported")
        _u64(handle)  # tensor count
        keys = _u64(handle)
        for _ in range(min(keys, _MAX_KEYS)):
            name = _read(handle, _u64(handle)).decode("utf-8", "replace")
            kind = int(struct.unpack("<I", _read(handle, 4))[0])
            if name == "general.architecture" and kind == _STRING:
                return _read(handle, _u64(handle)).decode("utf-8", "replace")
            _skip_value(handle, kind)
    return None


def write_tiny_gguf(path: str | Path, architecture: str, extra: bytes = b"") -> Path:
    """A header-only GGUF naming `architecture` (for tests of the architecture check), plus `extra` padding."""
    name = b"general.architecture"
    value = architecture.encode()
    header = _MAGIC + struct.pack("<IQQ", 3, 0, 1)
    header += struct.pack("<Q", len(name)) + name + struct.pack("<I", _STRING) + struct.pack("<Q", len(value)) + value
    target = Path(path)
    target.write_bytes(header + extra)
    return target
