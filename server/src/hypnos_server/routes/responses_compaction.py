"""Compaction items: the summary of a conversation that POST /v1/responses/compact makes, carried back as input.

The item's `encrypted_content` is opaque to clients (the spec's word) but not secret: a version prefix and the
summary text in base64, so that a later request on any Hypnos server reads it back; an item another server made is
refused (its content means nothing here)."""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import Any

import msgspec
from hypnos.errors import HypnosError

PREFIX = "hypnos-compaction-v1:"
SUMMARY_HEADING = "A summary of the conversation so far (it replaces the earlier turns):"


class CompactRequest(msgspec.Struct, kw_only=True):
    """POST /v1/responses/compact body: the fields Hypnos reads (unknown ones are ignored)."""

    model: str
    input: str | list[dict[str, Any]] | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    prompt_cache_key: str | None = None


def compaction_item(summary: str) -> dict[str, Any]:
    """The compaction item holding `summary`."""
    encoded = base64.b64encode(summary.encode()).decode()
    return {"type": "compaction", "id": f"cmp_{secrets.token_hex(12)}", "encrypted_content": PREFIX + encoded}


def read_summary(encrypted: object) -> str | None:
    """The summary in a compaction item's content; None when this server did not make it."""
    if not isinstance(encrypted, str) or not encrypted.startswith(PREFIX):
        return None
    try:
        return base64.b64decode(encrypted[len(PREFIX) :], validate=True).decode()
    except (binascii.Error, ValueError):
        return None


def compaction_input(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A compaction input item, normalized; 400 when its content is not one this server made."""
    if read_summary(item.get("encrypted_content")) is None:
        raise HypnosError(
            400,
            "invalid_request_error",
            f"`{where}` is a compaction item this server did not make (its `encrypted_content` means nothing here); "
            "send the conversation itself, or compact it with POST /v1/responses/compact on this server",
            code="invalid_compaction",
            param=f"{where}.encrypted_content",
        )
    return {
        "type": "compaction",
        "id": item.get("id") or f"cmp_{secrets.token_hex(12)}",
        "encrypted_content": item["encrypted_content"],
    }


def summary_message(item: dict[str, Any]) -> str:
    """What the model sees of a compaction item: the summary under a heading."""
    return f"{SUMMARY_HEADING}\n\n{read_summary(item['encrypted_content']) or ''}"
