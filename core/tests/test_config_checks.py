"""The startup config runs the same model checks as the pool routes: ids, ranges, paths, nesting, deep TOML."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.config import ConfigError, load_settings, settings_from_mapping


def model(**extra: object) -> dict[str, object]:
    return {"id": "m", "modality": "text_generation", "engine": "fake", **extra}


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        (model(id="a/b"), "`models[1].id`"),
        (model(id="x\ny"), "`models[1].id`"),
        (model(slots=100_000_000), "`models[1].slots`"),
        (model(context_len=1 << 30), "`models[1].context_len`"),
        (model(weights_path="a\x00b"), "`models[1].weights_path`"),
        (model(arch={"num_layers": -5}), "`models[1].arch.num_layers`"),
        (model(arch={f"k{i}": 1 for i in range(300_000)}), "`models[1].arch`: at most 64 keys"),
        (model(llama={"x": [[[[[[[[[[1]]]]]]]]]]}), "`models[1]`: tables and arrays nest"),
    ],
)
def test_a_startup_model_out_of_range_is_a_config_error_naming_the_key(entry: dict, named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_mapping({"models": [model(id="ok"), entry]}, "hypnos.toml")
    assert str(refused.value).startswith("hypnos.toml: ") and named in str(refused.value)


def test_a_config_file_nested_thousands_deep_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "hypnos.toml"
    config.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_settings(config, environ={})


def test_models_dir_with_a_nul_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="`models_dir`"):
        settings_from_mapping({"models_dir": "models\x00", "models": [model()]})


def test_sane_values_pass() -> None:
    settings = settings_from_mapping(
        {"models": [model(id="Org.m_2-q4:8b", slots=64, context_len=131072, arch={"num_layers": 30, "name": "x"})]}
    )
    assert settings.models[0].id == "Org.m_2-q4:8b"
