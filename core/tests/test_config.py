"""Config decoding: defaults, environment overrides, and errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.config import ConfigError, load_settings, settings_from_mapping
from hypnos.types import MemoryTier, Modality, ModelPriority

REPO = Path(__file__).resolve().parents[2]


def test_defaults_match_the_spec_limits() -> None:
    settings = load_settings(environ={})
    assert settings.server.port == 9999
    assert settings.limits.max_body_bytes == 256 * 1024 * 1024
    assert settings.limits.max_audio_bytes == 64 * 1024 * 1024
    assert settings.limits.max_image_bytes == 32 * 1024 * 1024
    assert settings.limits.max_document_bytes == 100 * 1024 * 1024
    assert settings.limits.max_prompt_chars == 1_000_000
    assert settings.limits.max_tokens_cap == 8192
    assert settings.limits.max_images_per_request == 4
    assert settings.limits.request_timeout_secs == 900
    assert settings.limits.max_queue_per_model == 8
    assert settings.limits.allow_remote_image_urls is True
    assert settings.limits.allow_private_urls is False


def test_example_config_documents_a_valid_file() -> None:
    settings = load_settings(REPO / "hypnos.example.toml", environ={})
    assert settings.server.keys[0].label
    assert {m.modality for m in settings.models} >= {Modality.TEXT_GENERATION}


def test_models_decode_with_engine_tables(tmp_path: Path) -> None:
    file = tmp_path / "h.toml"
    file.write_text(
        'models_dir = "weights"\n[[models]]\nid = "m"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
        'weights_path = "m.gguf"\npriority = "high"\ninitial_tier = "tier2_pinned_ram"\nslots = 3\n'
        "[models.arch]\nlayers = 30\n[models.llama]\nflash_attn = true\n"
    )
    settings = load_settings(file, environ={})
    model = settings.models[0]
    assert model.priority == ModelPriority.HIGH
    assert model.initial_tier == MemoryTier.TIER2
    assert model.arch == {"layers": 30}
    assert model.engine_options == {"llama": {"flash_attn": True}}
    assert settings.models_path == (tmp_path / "weights").resolve()
    assert model.resolve(settings.models_path, model.weights_path) == (tmp_path / "weights" / "m.gguf").resolve()


def test_environment_overrides_port_keys_and_config(tmp_path: Path) -> None:
    file = tmp_path / "h.toml"
    file.write_text('[server]\napi_keys = ["a"]\n')
    settings = load_settings(environ={"HYPNOS_CONFIG": str(file), "HYPNOS_PORT": "8123", "HYPNOS_API_KEYS": "b, c"})
    assert settings.server.port == 8123
    assert settings.server.api_keys == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"server": {"port": "x"}}, "`server.port`: Expected `int`, got `str`"),
        ({"server": {"prot": 1}}, "`server.prot`: unknown key"),
        ({"limits": {"max_body_bytes": 1.5}}, "`limits.max_body_bytes`: Expected `int`"),
        ({"hardware": {"min_gpu_layer_ratio": 3.0}}, "`hardware.min_gpu_layer_ratio`"),
        ({"models": [{"id": "a", "modality": "text", "engine": "e"}]}, "`models[0].modality`: Invalid enum value"),
        ({"models": [{"id": "a", "modality": "vision", "engine": "e", "slots": 0}]}, "`models[0].slots`"),
        ({"models": [{"id": "a", "modality": "vision", "engine": "e", "colour": 1}]}, "`models[0].colour`"),
        ({"models": [{"modality": "vision", "engine": "e"}]}, "`models[0]`: Object missing required field `id`"),
        (
            {
                "models": [
                    {"id": "a", "modality": "vision", "engine": "e"},
                    {"id": "a", "modality": "vision", "engine": "e"},
                ]
            },
            "`models[1].id`: the id `a` is used twice",
        ),
    ],
)
def test_bad_config_names_file_and_key(raw: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping(raw, "/etc/hypnos.toml")
    assert str(caught.value).startswith("/etc/hypnos.toml: ")
    assert expected in str(caught.value)


def test_unreadable_and_invalid_toml_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_settings(tmp_path / "missing.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(bad, environ={})


def test_bad_port_in_environment() -> None:
    with pytest.raises(ConfigError, match="HYPNOS_PORT"):
        load_settings(environ={"HYPNOS_PORT": "nine"})
