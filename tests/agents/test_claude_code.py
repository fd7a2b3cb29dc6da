"""Claude Code (`claude -p`, ANTHROPIC_BASE_URL) runs a one-tool-call task on the starter lineup: every request it
sends is a 200 and its Read (or Bash) tool reads the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents_kit import CLI_TIMEOUT, HERE, TASK, RequestLog, Served, assert_every_request_ok, json_lines, run_cli

CLAUDE = HERE / "node_modules" / ".bin" / "claude"


def blocks(events: list[dict[str, Any]], role: str, kind: str) -> list[dict[str, Any]]:
    """The content blocks of type `kind` in the transcript's `role` messages."""
    found = []
    for event in events:
        message = event.get("message") if event.get("type") == role else None
        content = message.get("content") if isinstance(message, dict) else None
        found += [block for block in content or [] if isinstance(block, dict) and block.get("type") == kind]
    return found


def test_claude_print_reads_hello_txt(
    served: Served,
    request_log: RequestLog,
    workdir: tuple[Path, str],
    node_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder, word = workdir
    home = tmp_path_factory.mktemp("claude-home")
    env = {
        **node_env,
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": served.base,
        "ANTHROPIC_API_KEY": "unused",
        "ANTHROPIC_MODEL": served.model,
        "ANTHROPIC_SMALL_FAST_MODEL": served.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": served.model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # a 2-core CPU beside other work prefills Claude Code's first prompt (11.6k tokens) past its 600 s default:
        # it then gives up on the request, sends it again and ends without an answer
        "API_TIMEOUT_MS": str(int(CLI_TIMEOUT * 1000)),
        # --dangerously-skip-permissions refuses root unless the run says it is a deliberate sandbox (CI runs as root)
        "IS_SANDBOX": "1",
        # the README's advice for small models: without auto memory the system prompt has no memory section, whose
        # front-matter example the 0.5B starter copied as its answer (its first request replayed over 24 seeds called
        # Read 10 times with the section, 21 without it)
        "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
    }
    command = [str(CLAUDE), "-p", TASK, "--dangerously-skip-permissions", "--output-format", "stream-json", "--verbose"]
    stdout, stderr = run_cli(command, folder, env)
    events = json_lines(stdout)
    results = [event for event in events if event.get("type") == "result"]
    answer = str(results[-1].get("result", "")) if results else ""
    assert_every_request_ok(request_log.records())
    calls = blocks(events, "assistant", "tool_use")
    outputs = [block for block in blocks(events, "user", "tool_result") if not block.get("is_error")]
    tool_read = any(word in str(block.get("content")) for block in outputs)
    assert tool_read or word in answer, (
        f"no tool read hello.txt: calls {calls}, results {outputs}, answer {answer!r}, stderr {stderr[-3000:]}"
    )
