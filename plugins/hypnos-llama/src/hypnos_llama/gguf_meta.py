"""A minimal GGUF header reader: metadata key/values and tensor sizes, without loading weights or a library."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# Arrays longer than this (vocabularies, merges) are skipped and recorded as their length only.
_MAX_KEPT_ARRAY = 4096
# ggml type -> (elements per block, bytes per block), for the types whose layout is fixed (ggml.c's type traits)
_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66),
}  # fmt: skip


class GgufError(ValueError):
    """The file is not a GGUF this reader understands."""


@dataclass(frozen=True)
class GgufTensor:
    """One tensor's name, ggml type, shape and byte size in the file."""

    name: str
    ggml_type: int
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass
class GgufFile:
    """A GGUF's metadata and tensor table."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[GgufTensor] = field(default_factory=list)
    array_lengths: dict[str, int] = field(default_factory=dict)

    @property
    def arch(self) -> str:
        """general.architecture (e.g. llama, qwen2)."""
        return str(self.metadata.get("general.architecture", "llama"))

    def arch_value(self, key: str, default: Any = None) -> Any:
        """The `<arch>.<key>` metadata value."""
        return self.metadata.get(f"{self.arch}.{key}", default)

    @property
    def chat_template(self) -> str | None:
        """tokenizer.chat_template, when the file has one."""
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None


class _Reader:
    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = self.handle.read(size)
        if len(data) != size:
            raise GgufError("truncated GGUF header")
        return struct.unpack(fmt, data)[0]

    def string(self) -> str:
        length = self.unpack("<Q")
        return self.handle.read(length).decode("utf-8", "replace")

    def skip_string(self) -> None:
        self.handle.seek(self.unpack("<Q"), 1)

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        raise GgufError(f"unexpected GGUF value type {kind}")


def _read_array(reader: _Reader) -> tuple[list[Any] | None, int]:
    """An array value, or None (skipped) when it is long; returns (values, length)."""
    kind = reader.unpack("<I")
    length = reader.unpack("<Q")
    if length <= _MAX_KEPT_ARRAY and kind != _ARRAY:
        return [reader.value(kind) for _ in range(length)], length
    if kind in _SCALARS:
        reader.handle.seek(struct.calcsize(_SCALARS[kind]) * length, 1)
    elif kind == _STRING:
        for _ in range(length):
            reader.skip_string()
    else:
        for _ in range(length):
            _read_array(reader)
    return None, length


def read_gguf(path: str | Path) -> GgufFile:
    """Read the metadata and tensor table of a GGUF file (headers only; long arrays are skipped)."""
    path = Path(path)
    file_size = path.stat().st_size
    with path.open("rb") as handle:
        reader = _Reader(handle)
        if handle.read(4) != GGUF_MAGIC:
            raise GgufError(f"{path} is not a GGUF file")
        version = reader.unpack("<I")
        if version < 2:
            raise GgufError(f"{path}: GGUF version {version} is too old")
        n_tensors = reader.unpack("<Q")
        n_kv = reader.unpack("<Q")
        metadata: dict[str, Any] = {}
        lengths: dict[str, int] = {}
        for _ in range(n_kv):
            key = reader.string()
            kind = reader.unpack("<I")
            if kind == _ARRAY:
                values, length = _read_array(reader)
                lengths[key] = length
                if values is not None:
                    metadata[key] = values
            else:
                metadata[key] = reader.value(kind)
        raw: list[tuple[str, int, tuple[int, ...], int]] = []
        for _ in range(n_tensors):
            name = reader.string()
            n_dims = reader.unpack("<I")
            shape = tuple(reader.unpack("<Q") for _ in range(n_dims))
            ggml_type = reader.unpack("<I")
            offset = reader.unpack("<Q")
            raw.append((name, ggml_type, shape, offset))
        alignment = int(metadata.get("general.alignment", 32))
        data_start = -(-handle.tell() // alignment) * alignment
    # Byte sizes from the offsets: exact for every ggml type, including ones this reader has never heard of.
    ordered = sorted(raw, key=lambda item: item[3])
    _check_complete(path, ordered, file_size - data_start)
    ends = [item[3] for item in ordered[1:]] + [file_size - data_start]
    tensors = [
        GgufTensor(name=name, ggml_type=kind, shape=shape, offset=offset, nbytes=max(0, end - offset))
        for (name, kind, shape, offset), end in zip(ordered, ends, strict=True)
    ]
    return GgufFile(path=path, version=version, metadata=metadata, tensors=tensors, array_lengths=lengths)


def _declared_nbytes(ggml_type: int, shape: tuple[int, ...]) -> int | None:
    """A tensor's byte size from its type and shape (None for a type whose layout this reader does not know)."""
    layout = _BLOCKS.get(ggml_type)
    if layout is None:
        return None
    elements = 1
    for size in shape:
        elements *= size
    per_block, block_bytes = layout
    return -(-elements // per_block) * block_bytes


def _check_complete(path: Path, ordered: list[tuple[str, int, tuple[int, ...], int]], data_bytes: int) -> None:
    """GgufError when the file ends before its tensor table says its data does (a cut download or copy): llama.cpp
    would refuse it on every load."""
    if not ordered:
        return
    name, ggml_type, shape, offset = ordered[-1]
    needed = offset + (_declared_nbytes(ggml_type, shape) or 1)
    if needed > data_bytes:
        raise GgufError(
            f"{path.name} is truncated: its tensor table needs {needed} bytes of tensor data (up to the end of "
            f"`{name[:64]}`), the file holds {max(0, data_bytes)}; download it again"
        )
