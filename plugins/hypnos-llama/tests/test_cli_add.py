"""`hypnos add` and `hypnos show` of a GGUF where it lies (the plugin's describe hook), then `hypnos run` of it on
the real server."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos_llama.describe import describe
from hypnos_llama.testing import write_tiny_llama
from hypnos_server import cli
from hypnos_server.testing import free_port, live_server

QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"  # what the qwen_models_dir fixture holds


def test_describe_reads_the_block_defaults_and_facts_from_the_gguf(tmp_path: Path) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    described = describe(path)
    assert described is not None
    assert described["block"] == {
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": str(path),
        "context_len": described["facts"]["context"],
    }
    assert described["facts"]["architecture"] == "llama" and described["facts"]["quantization"] == "Q8_0"
    assert describe(tmp_path) == described  # a folder holding it
    (tmp_path / "notes.txt").write_text("x")
    assert describe(tmp_path / "notes.txt") is None


@pytest.mark.model
def test_add_the_starter_gguf_from_elsewhere_show_it_and_run_it(qwen_models_dir: Path, tmp_path: Path, capsys) -> None:
    elsewhere = tmp_path / "my files"
    elsewhere.mkdir()
    (elsewhere / "Qwen-Coder.gguf").symlink_to(qwen_models_dir / QWEN_FILE)  # a file outside models_dir
    port = free_port()
    config = tmp_path / "hypnos.toml"
    config.write_text(f'models_dir = "models"\n[server]\nport = {port}\n')
    (tmp_path / "models").mkdir()
    assert cli.main(["add", str(elsewhere / "Qwen-Coder.gguf"), "--config", str(config)]) == 0
    assert cli.main(["show", "qwen-coder", "--config", str(config)]) == 0
    shown = capsys.readouterr().out
    assert "qwen2" in shown and "Q4_K_M" in shown and "context_len = 8192" in shown and "chat template" in shown
    with live_server(config, port=port, env={"HYPNOS_PLUGINS": "llama"}) as base:
        question = ["What", "is", "the", "capital", "of", "France?"]
        assert cli.main(["run", "qwen-coder", *question, "--url", base, "--max-tokens", "24"]) == 0
        assert "Paris" in capsys.readouterr().out
        assert cli.main(["ps", "--url", base]) == 0
        out = capsys.readouterr().out
        (row,) = [line.split() for line in out.splitlines() if line.strip().startswith("qwen-coder")]
        assert row[3] != "-" and row[4] in ("MB", "GB")  # the engine host's measured memory
