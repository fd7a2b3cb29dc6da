"""Typed engine options: tables checked against the kind, decoded once, errors naming file, model, table, key."""

from __future__ import annotations

import msgspec
import pytest
from hypnos.config import ConfigError, settings_from_mapping
from hypnos.engine import EngineKind
from hypnos.options import check_engine_options
from hypnos.types import Modality


class Voice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A test table."""

    speed: float = 1.0
    name: str = "af"


def _kinds() -> dict[str, EngineKind]:
    kind = EngineKind("tts", frozenset({Modality.TEXT_TO_SPEECH}), lambda m, c: None, frozenset({"raw"}),
                      options={"voice": Voice}, spec_kind="onnx_runtime")  # fmt: skip
    return {"tts": kind}


def _settings(**tables: object):
    model = {"id": "speaker", "modality": "text_to_speech", "engine": "tts", **tables}
    other = {"id": "x", "modality": "embeddings", "engine": "not-installed", "whatever": {"a": 1}}
    return settings_from_mapping({"models": [model, other]}, "/etc/hypnos.toml")


def test_tables_decoded_with_defaults() -> None:
    decoded = check_engine_options(_settings(voice={"speed": 2}), _kinds())
    assert decoded == {"speaker": {"voice": Voice(speed=2.0)}}
    assert check_engine_options(_settings(), _kinds())["speaker"]["voice"] == Voice()
    assert check_engine_options(_settings(raw={"free": "form"}), _kinds())["speaker"] == {"voice": Voice()}


@pytest.mark.parametrize(
    ("tables", "expected"),
    [
        ({"voices": {"speed": 2}}, "model `speaker`: unknown table [models.voices] for the engine `tts`"),
        ({"voice": {"sped": 2}}, "model `speaker`: [models.voice] key `sped`: unknown key"),
        ({"voice": {"speed": "fast"}}, "model `speaker`: [models.voice] key `speed`: Expected `float`, got `str`"),
    ],
)
def test_bad_table_key_or_type_is_one_line(tables: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_engine_options(_settings(**tables), _kinds())
    message = str(caught.value)
    assert message.startswith("/etc/hypnos.toml: ") and expected in message and "\n" not in message
