"""Codex CLI (`codex exec`, a custom provider on Responses) runs a one-tool-call task on the starter lineup: every
request it sends is a 200 and its shell tool reads the file, over HTTP (SSE) and over the Responses WebSocket
(`supports_websockets = true`: its turns go as `response.create` messages on `GET /v1/responses`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_kit import HERE, TASK, RequestLog, Served, assert_every_request_ok, describe, json_lines, run_cli

CODEX = HERE / "node_modules" / ".bin" / "codex"


def codex_home(root: Path, served: Served, websocket: bool) -> Path:
    """A CODEX_HOME whose config.toml names the server as a custom provider on Responses (over its WebSocket when
    `websocket`); no approvals, a sandbox that lets commands read."""
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
        f"supports_websockets = {'true' if websocket else 'false'}\n"
        "stream_idle_timeout_ms = 1800000\n"  # a 2-core CPU prefills Codex's first prompt past the 300 s default
    )
    return home


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_codex_exec_reads_hello_txt(
    transport: str,
    served: Served,
    request_log: RequestLog,
    workdir: tuple[Path, str],
    node_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder, word = workdir
    root = tmp_path_factory.mktemp("codex")
    home = codex_home(root, served, websocket=transport == "websocket")
    env = {**node_env, "CODEX_HOME": str(home), "HOME": str(root), "HYPNOS_API_KEY": "unused"}
    command = [str(CODEX), "exec", "--json", "--skip-git-repo-check", "--ephemeral", "-C", str(folder), TASK]
    stdout, stderr = run_cli(command, folder, env)
    events = json_lines(stdout)
    items = [event["item"] for event in events if event.get("type") == "item.completed" and "item" in event]
    answers = [str(item.get("text", "")) for item in items if item.get("type") == "agent_message"]
    tools = [item for item in items if item.get("type") not in ("agent_message", "reasoning")]
    records = request_log.records()
    assert_every_request_ok(records)
    methods = {record["method"] for record in records if record["route"] == "/v1/responses"}
    assert methods == {"GET" if transport == "websocket" else "POST"}, f"Codex over {transport}: {describe(records)}"
    tool_read = any(word in str(item) for item in tools)
    assert tool_read or any(word in answer for answer in answers), (
        f"no tool read hello.txt: tool items {tools}, answers {answers}, stderr {stderr[-3000:]}"
    )
