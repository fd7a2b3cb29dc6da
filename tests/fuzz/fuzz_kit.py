"""What every fuzz test checks of an answer: never 5xx, always x-request-id, errors in the spec's body."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field

API_KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
USER_KEY = "fuzz-user-key"  # a second tenant, not an admin
USER_AUTH = {"Authorization": f"Bearer {USER_KEY}"}
USER_KEY_TABLE = f'\n[[server.keys]]\nkey = "{USER_KEY}"\nlabel = "fuzz-user"\n'
REQUEST_ID = re.compile(r"^req-[0-9a-f]{32}$")
PLAIN_TEXT_STATUSES = {408, 413}  # the timeout and body-limit layers answer plain text (section 4)
MAX_BODY_BYTES = 2 * 1024 * 1024
CONFIG = f"""
[limits]
max_body_bytes = {MAX_BODY_BYTES}
max_audio_bytes = 1048576
max_image_bytes = 1048576
max_prompt_chars = 100000
max_tokens_cap = 8
max_queue_per_model = 64
request_timeout_secs = 60

[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"
modalities = ["vision", "embeddings", "speech_to_text", "text_to_speech", "image_generation"]

[[models]]
id = "fake-embed"
modality = "embeddings"
engine = "fake"

[[models]]
id = "fake-image"
modality = "image_generation"
engine = "fake"
image = {{ edit = true }}
"""
FAKE_SERVED = {"text_generation": "fake-chat", "embeddings": "fake-embed", "image_generation": "fake-image",
               "speech_to_text": "fake-chat", "text_to_speech": "fake-chat"}  # fmt: skip
# appended to the starter config in the second pass: small answers, the same body limit
STARTER_LIMITS = f"""
[limits]
max_body_bytes = {MAX_BODY_BYTES}
max_tokens_cap = 8
max_prompt_chars = 4000
max_queue_per_model = 64
request_timeout_secs = 120
"""


def problems(status: int, headers: dict[str, str], body: bytes, has_body: bool = True) -> list[str]:
    """What is wrong with one answer (an empty list when nothing is); a HEAD answer (`has_body` false) has no body."""
    found = []
    if status >= 500:
        found.append(f"answered {status}")
    if not REQUEST_ID.match(headers.get("x-request-id", "")):
        found.append(f"x-request-id missing or malformed: {headers.get('x-request-id')!r}")
    if status < 400 or not has_body:
        return found
    media = headers.get("content-type", "").split(";")[0].strip()
    if status in PLAIN_TEXT_STATUSES and media == "text/plain":
        return found
    if media != "application/json":
        return [*found, f"error {status} answered as {media!r}"]
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return [*found, f"error {status} body is not the spec's error body: {body[:200]!r}"]
    if (
        not isinstance(error, dict)
        or not isinstance(error.get("message"), str)
        or not isinstance(error.get("type"), str)
    ):
        found.append(f"error {status} lacks message/type: {body[:200]!r}")
    elif len(body) > 8192:
        found.append(f"error {status} body is {len(body)} bytes")
    return found


@dataclass
class Tally:
    """Cases tried and problems found, per source (schemathesis, corpus)."""

    cases: dict[str, int] = field(default_factory=dict)
    server_errors: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    def note(self, source: str, label: str, status: int, found: list[str]) -> None:
        """Count one answer and keep what was wrong with it."""
        self.cases[source] = self.cases.get(source, 0) + 1
        if status >= 500:
            self.server_errors[source] = self.server_errors.get(source, 0) + 1
        if status < 300:
            self.ok[source] = self.ok.get(source, 0) + 1
        self.findings.extend(f"{label}: {problem}" for problem in found)

    def summary(self) -> str:
        """One line: cases tried and 5xx answers per source."""
        parts = [f"{source}: {count} cases ({self.ok.get(source, 0)} answered 2xx), "
                 f"{self.server_errors.get(source, 0)} answers >= 500"
                 for source, count in sorted(self.cases.items())]  # fmt: skip
        return "; ".join(parts) or "no cases"


@dataclass
class Answer:
    """A raw HTTP answer: status, lower-cased headers (last one wins), the de-chunked body."""

    status: int
    headers: dict[str, str]
    body: bytes


def raw_request(
    base: str, method: str, target: str, headers: dict[str, str], body: bytes = b"", length: int | None = None
) -> Answer:
    """Send exactly these bytes (no path or header normalisation) over one connection and read the whole answer.

    `length` declares a Content-Length other than the body's (a body too large to send, refused from its header).
    """
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(base)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {where.netloc}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if length is not None or body or method in {"POST", "PUT", "PATCH"}:
        lines.append(f"Content-Length: {len(body) if length is None else length}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
    with socket.create_connection((where.hostname, where.port), timeout=60) as sock:
        try:
            sock.sendall(head + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (413) and closed before reading it all: its answer is still there to read
        chunks = []
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    raw = b"".join(chunks)
    header_block, _, payload = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = header_block.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    if parsed.get("transfer-encoding") == "chunked":
        payload = _dechunk(payload)
    return Answer(status=int(status_line.split()[1]), headers=parsed, body=payload)


def _dechunk(payload: bytes) -> bytes:
    out = bytearray()
    while payload:
        size_line, _, rest = payload.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        payload = rest[size + 2 :]
    return bytes(out)
