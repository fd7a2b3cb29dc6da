"""Codex CLI (`codex exec`, a custom provider on Responses) runs a one-tool-call task on the starter lineup: every
request it sends is a 200 and its shell tool reads the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_kit import HERE, TASK, RequestLog, Served, assert_every_request_ok, json_lines, run_cli

CODEX = HERE / "node_modules" / ".bin" / "codex"


def codex_home(root: Path, served: Served) -> Path:
    """A CODEX_HOME whose config.toml names the server as a custom provider on Responses; no approvals, a sandbox
    that lets commands read."""
    home = root / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'model = "{served.model}"\n'
        'model_provider = "hypnos"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "read-only"\n'
        "[model_providers.hypnos]\n"
        'name = "Hypnos"\n'
        f'base_url = "{served.base}/v1"\n'
        'env_key = "HYPNOS_API_KEY"\n'
        'wire_api = "responses"\n'
        "stream_idle_timeout_ms = 1800000\n"  # a 2-core CPU prefills Codex's first prompt past the 300 s default
    )
    return home


def test_codex_exec_reads_hello_txt(
    served: Served,
    request_log: RequestLog,
    workdir: tuple[Path, str],
    node_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder, word = workdir
    root = tmp_path_factory.mktemp("codex")
    env = {**node_env, "CODEX_HOME": str(codex_home(root, served)), "HOME": str(root), "HYPNOS_API_KEY": "unused"}
    command = [str(CODEX), "exec", "--json", "--skip-git-repo-check", "--ephemeral", "-C", str(folder), TASK]
    stdout, stderr = run_cli(command, folder, env)
    events = json_lines(stdout)
    items = [event["item"] for event in events if event.get("type") == "item.completed" and "item" in event]
    answers = [str(item.get("text", "")) for item in items if item.get("type") == "agent_message"]
    tools = [item for item in items if item.get("type") not in ("agent_message", "reasoning")]
    assert_every_request_ok(request_log.records())
    tool_read = any(word in str(item) for item in tools)
    assert tool_read or any(word in answer for answer in answers), (
        f"no tool read hello.txt: tool items {tools}, answers {answers}, stderr {stderr[-3000:]}"
    )
