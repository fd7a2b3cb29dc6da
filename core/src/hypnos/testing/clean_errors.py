"""What an error body must never show a client: a Python repr, a filesystem path, an exception's own text."""

from __future__ import annotations

import re

LEAKS = {
    "a Python repr": re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>|\b0x[0-9a-fA-F]{8,}\b"),
    "a traceback": re.compile(r"Traceback|File \"[^\"]+\", line \d+"),
    "an exception's name": re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b|\[Errno \d+\]"),
    # an absolute path outside the API's own routes (/v1/..., /ready, /health, /metrics)
    "a filesystem path": re.compile(r"(?<![\w.:/`])/(?!v1/|ready\b|health\b|metrics\b)[\w.-]+/[\w./-]+|[A-Za-z]:\\\\"),
}


def message_leaks(message: str) -> list[str]:
    """What of LEAKS the message shows, each named with the text that matched (empty when clean)."""
    return [f"{what}: {found.group(0)!r}" for what, pattern in LEAKS.items() if (found := pattern.search(message))]


def assert_clean_message(message: str) -> None:
    """Fail naming what the message leaks."""
    leaks = message_leaks(message)
    assert not leaks, f"the error message leaks {'; '.join(leaks)}: {message!r}"
