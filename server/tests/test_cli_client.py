"""The `hypnos` client commands (run, ls, ps, show, add, rm) against a real `hypnos serve` on fake engines, and on the
config alone when no server answers."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypnos.gguf_arch import write_tiny_gguf
from hypnos_server import cli, cli_chat
from hypnos_server.cli_connect import target_of
from hypnos_server.testing import free_port, live_server

CONFIG = """
models_dir = "models"

[server]
port = {port}

[[models]]
id = "chat"
modality = "text_generation"
engine = "fake"

[[models]]
id = "gone"
modality = "text_generation"
engine = "fake"
weights_path = "gone.gguf"
"""
ENV = {"HYPNOS_PLUGINS": "fake"}


def write_config(folder: Path, port: int) -> Path:
    (folder / "models").mkdir(parents=True, exist_ok=True)
    config = folder / "hypnos.toml"
    config.write_text(CONFIG.format(port=port))
    return config


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    folder = tmp_path_factory.mktemp("served")
    port = free_port()
    config = write_config(folder, port)
    with live_server(config, port=port, env=ENV) as base:
        yield config, base


def api_answer(base: str, messages: list[dict[str, str]]) -> str:
    """The same model's answer through the API (the fake engine answers a prompt deterministically)."""
    body = {"model": "chat", "messages": messages}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30).json()["choices"][0]["message"]["content"]


def test_run_answers_a_prompt_streamed(served, capsys) -> None:
    _, base = served
    assert cli.main(["run", "chat", "what", "is", "up", "--url", base]) == 0
    assert capsys.readouterr().out == api_answer(base, [{"role": "user", "content": "what is up"}]) + "\n"


def test_run_reads_a_piped_prompt_and_finds_the_server_from_the_config(served) -> None:
    config, base = served
    done = subprocess.run(
        [sys.executable, "-m", "hypnos_server.cli", "run", "chat", "sum", "up:", "--config", str(config)],
        input="first line\nsecond line\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    expected = api_answer(base, [{"role": "user", "content": "sum up:\n\nfirst line\nsecond line\n"}])
    assert done.stdout == expected + "\n"


def test_run_names_an_unknown_model_and_a_missing_server(served, capsys, tmp_path) -> None:
    _, base = served
    assert cli.main(["run", "nope", "hi", "--url", base]) == 1
    assert "`nope` does not exist" in capsys.readouterr().err
    assert cli.main(["run", "chat", "hi", "--url", f"http://127.0.0.1:{free_port()}"]) == 1
    assert "start one with `./run.sh`" in capsys.readouterr().err


def test_terminal_chat_keeps_history_multi_line_clear_and_bye(served, capsys) -> None:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    _, base = served
    args = cli._parser().parse_args(["run", "chat", "--url", base, "--verbose"])
    with create_pipe_input() as pipe:
        pipe.send_text('hello there\r"""\rline one\rline two"""\r/clear\ragain\r/bye\rnever sent\r')
        session = PromptSession(input=pipe, output=DummyOutput())
        assert cli_chat.run_command(args, session=session) == 0
    captured = capsys.readouterr()
    first = api_answer(base, [{"role": "user", "content": "hello there"}])
    history = [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "line one\nline two"},
    ]
    second = api_answer(base, history)
    third = api_answer(base, [{"role": "user", "content": "again"}])
    lines = captured.out.splitlines()
    assert lines[1:] == [first, second, "Cleared the conversation.", third]
    prompts = [int(line.split(",")[0].split(": ")[1]) for line in captured.err.splitlines()]
    assert prompts[1] > prompts[0] + 4 and prompts[2] == 1  # the history went with the second; /clear dropped it


def test_ls_and_ps_show_the_pool_and_the_resident_model_with_measured_memory(served, capsys) -> None:
    _, base = served
    api_answer(base, [{"role": "user", "content": "load it"}])
    assert cli.main(["ls", "--url", base]) == 0
    listed = capsys.readouterr().out
    assert "chat" in listed and "text_generation" in listed and "gone" in listed
    assert cli.main(["ps", "--url", base]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("chat")]
    (row,) = rows
    assert row[1:3] == ["1", "GPU"] and row[4] in ("kB", "MB", "GB")  # a measured size, not "-"
    assert row[3] != "-"


def test_without_a_server_ls_reads_the_config_and_names_missing_files(tmp_path, capsys) -> None:
    config = write_config(tmp_path, free_port())
    assert cli.main(["ls", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "missing" in out and "gone.gguf" in out and "no server answers" in out


def test_add_show_rm_on_the_config_when_no_server_runs(tmp_path, capsys) -> None:
    config = write_config(tmp_path, free_port())
    elsewhere = tmp_path / "elsewhere" / "My-Model.Q4.gguf"
    elsewhere.parent.mkdir()
    write_tiny_gguf(elsewhere, "qwen2")
    assert cli.main(["add", str(elsewhere), "--config", str(config)]) == 0
    overlay = tomllib.loads((tmp_path / "hypnos.models.toml").read_text())
    assert overlay["models"] == [
        {"id": "my-model.q4", "modality": "text_generation", "engine": "fake", "weights_path": str(elsewhere)}
    ]
    assert "hypnos run my-model.q4" in capsys.readouterr().out
    assert cli.main(["show", "my-model.q4", "--config", str(config)]) == 0
    shown = capsys.readouterr().out
    assert "qwen2" in shown and str(elsewhere) in shown and 'engine = "fake"' in shown
    assert cli.main(["add", str(elsewhere), "--config", str(config)]) == 1
    assert "already configured" in capsys.readouterr().err
    assert cli.main(["rm", "chat", "--config", str(config)]) == 0
    assert [m.id for m in target_of(cli._parser().parse_args(["ls", "--config", str(config)])).settings.models] == [
        "gone",
        "my-model.q4",
    ]


def test_added_file_where_it_lies_is_served_after_a_restart_and_live_when_in_a_model_root(tmp_path, capsys) -> None:
    config = write_config(tmp_path, free_port())
    elsewhere = tmp_path / "elsewhere" / "mine.gguf"
    elsewhere.parent.mkdir()
    write_tiny_gguf(elsewhere, "llama")
    assert cli.main(["add", str(elsewhere), "--config", str(config)]) == 0
    with live_server(config, env=ENV) as base:
        capsys.readouterr()
        assert cli.main(["run", "mine", "hi", "--url", base]) == 0
        assert capsys.readouterr().out.strip()
        other = tmp_path / "other" / "live.gguf"
        other.parent.mkdir()
        write_tiny_gguf(other, "llama")
        assert cli.main(["add", str(other), "--url", base, "--config", str(config)]) == 1
        refusal = capsys.readouterr().err
        assert "`server.model_roots`" in refusal and "stop the server" in refusal  # it says what to change
    config.write_text(config.read_text().replace("[server]", f'[server]\nmodel_roots = ["{other.parent}"]'))
    with live_server(config, env=ENV) as base:
        assert cli.main(["add", str(other), "--url", base, "--config", str(config)]) == 0
        assert cli.main(["run", "live", "hi", "--url", base]) == 0
        assert capsys.readouterr().out.strip().endswith(api_answer_of(base, "live"))


def api_answer_of(base: str, model: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30).json()["choices"][0]["message"]["content"]
