"""How /v1/embeddings writes vectors: JSON float arrays, or OpenAI's base64 of little-endian float32."""

from __future__ import annotations

import base64
import sys
from array import array
from typing import Any

from hypnos.errors import invalid_request

ENCODINGS = ("float", "base64")


def check_encoding_format(encoding_format: str | None) -> str:
    """The encoding to answer in: `float` (the default) or `base64`; anything else is a 400 naming the field."""
    if encoding_format is None:
        return "float"
    if encoding_format not in ENCODINGS:
        raise invalid_request(f"`encoding_format` must be one of {', '.join(ENCODINGS)}")
    return encoding_format


def encode_vector(vector: list[float], encoding_format: str) -> Any:
    """One vector as the wire carries it: the float list, or base64 of its float32 values in little-endian order."""
    if encoding_format == "float":
        return vector
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")
