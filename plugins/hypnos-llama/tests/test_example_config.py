"""hypnos.example.toml names the very files `hypnos starter` writes: every path of its models exists after it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.config import load_settings
from hypnos_server.plugin_loading import installed_plugin_manager
from hypnos_server.starter import write_starter_config

EXAMPLE = Path(__file__).resolve().parents[3] / "hypnos.example.toml"
PATH_KEYS = ("weights_path", "aux_path", "text_encoder_path", "tokenizer_path", "voices_path")


@pytest.mark.model
def test_the_example_config_names_the_files_the_starter_writes(qwen_models_dir: Path, tmp_path: Path) -> None:
    write_starter_config(installed_plugin_manager(), qwen_models_dir, tmp_path / "starter.toml")
    settings = load_settings(EXAMPLE, environ={})
    named = [(model.id, key, getattr(model, key)) for model in settings.models for key in PATH_KEYS]
    missing = [item for item in named if item[2] and not (qwen_models_dir / item[2]).exists()]
    assert [model.id for model in settings.models] == ["qwen2.5:0.5b", "all-minilm-l6-v2", "kokoro-82m"]
    assert missing == []
