"""A batch's input file read line by line: the requests to run, and each bad line's error (with its custom_id when it
has one), never an exception; and the output and error lines in OpenAI's shapes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

from hypnos_server.batches.store import new_line_id

# The routes a batch may name: JSON in, one JSON answer out.
ENDPOINTS = (
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
    "/v1/rerank",
    "/v1/entities",
    "/v1/images/generations",
)
MAX_LINES = 50_000
MAX_ERRORS_SHOWN = 100  # validation errors listed in the batch object (all of them go to the error file)
WINDOW = re.compile(r"^([1-9][0-9]{0,6})([smhd])$")
WINDOW_SECS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One valid request of a batch: its line number (from 1), custom_id and JSON body."""

    number: int
    custom_id: str
    body: bytes
    model: str | None


@dataclass(slots=True)
class ReadInput:
    """What an input file holds: the valid lines, and one error line per bad one."""

    lines: list[BatchLine]
    invalid: list[dict[str, Any]]
    problems: list[dict[str, Any]]  # the batch object's `errors.data` (the first MAX_ERRORS_SHOWN)


def window_secs(window: str) -> int | None:
    """The seconds of a completion_window such as "24h" (s, m, h or d); None when malformed."""
    match = WINDOW.match(window)
    return None if match is None else int(match.group(1)) * WINDOW_SECS[match.group(2)]


def error_line(custom_id: str | None, code: str, message: str) -> dict[str, Any]:
    """An error-file line for a request that never ran."""
    return {"id": new_line_id(), "custom_id": custom_id, "response": None, "error": {"code": code, "message": message}}


def answer_line(custom_id: str, status: int, request_id: str, body: Any) -> dict[str, Any]:
    """An output-file line (2xx) or error-file line (any other status) of a request that ran."""
    return {
        "id": new_line_id(),
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }


def _check(number: int, raw: bytes, endpoint: str, seen: set[str]) -> BatchLine | tuple[str | None, str, str]:
    try:
        request = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None, "invalid_json", f"Line {number} is not valid JSON"
    if not isinstance(request, dict):
        return None, "invalid_request", f"Line {number} is not a JSON object"
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return None, "missing_custom_id", f"Line {number} has no `custom_id` string"
    if custom_id in seen:
        return custom_id, "duplicate_custom_id", f"Line {number}: `custom_id` {custom_id!r} was used before"
    seen.add(custom_id)
    if request.get("method", "POST") != "POST":
        return custom_id, "invalid_method", f"Line {number}: `method` must be POST"
    if request.get("url") != endpoint:
        return custom_id, "invalid_url", f"Line {number}: `url` must be the batch's endpoint {endpoint}"
    body = request.get("body")
    if not isinstance(body, dict):
        return custom_id, "invalid_body", f"Line {number}: `body` must be a JSON object"
    if body.get("stream") is True or body.get("background") is True:
        return custom_id, "invalid_body", f"Line {number}: a batch line cannot stream or run in the background"
    model = body.get("model")
    return BatchLine(number, custom_id, msgspec.json.encode(body), model if isinstance(model, str) else None)


def read_input(data: bytes, endpoint: str) -> ReadInput:
    """Check every line of an input file (empty lines skipped); past MAX_LINES the rest are errors."""
    lines: list[BatchLine] = []
    invalid: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(lines) + len(invalid) >= MAX_LINES:
            checked: BatchLine | tuple[str | None, str, str] = (None, "too_many_lines", f"Line {number}: too many")
        else:
            checked = _check(number, raw, endpoint, seen)
        if isinstance(checked, BatchLine):
            lines.append(checked)
            continue
        custom_id, code, message = checked
        invalid.append(error_line(custom_id, code, message))
        if len(problems) < MAX_ERRORS_SHOWN:
            problems.append({"code": code, "message": message, "param": None, "line": number})
    return ReadInput(lines, invalid, problems)
