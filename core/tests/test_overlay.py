"""The pool overlay file, its TOML writer, the atomic write, and the GGUF architecture reader."""

from __future__ import annotations

import struct
import tomllib
from pathlib import Path

import pytest
from hypnos.config import ConfigError, settings_from_mapping
from hypnos.gguf_arch import GgufHeaderError, gguf_architecture, write_tiny_gguf
from hypnos.overlay import PoolOverlay, atomic_write, load_pool, overlay_path, parse_model_block
from hypnos.tomlw import dumps

BASE = [
    {"id": "a", "modality": "text_generation", "engine": "fake"},
    {"id": "b", "modality": "embeddings", "engine": "fake"},
]


def block(model_id: str, **extra) -> dict:  # type: ignore[no-untyped-def, type-arg]
    return {"id": model_id, "modality": "text_generation", "engine": "fake", **extra}


def test_toml_writer_round_trips_what_the_overlay_holds() -> None:
    document = {
        "overlay_version": 1,
        "removed": ["x y", 'quote"d'],
        "models": [
            block("m:1", slots=2, arch={"n_ctx": 4096}, llama={"flash": True, "ratio": 0.5, "name": "ünï\n"}),
            block("m2", modalities=["vision"], arch={}),
        ],
        "odd key": {"nested.dotted": [1, 2.5, "three"]},
    }
    assert tomllib.loads(dumps(document)) == document


def test_overlay_name_is_next_to_the_config() -> None:
    assert overlay_path("/etc/hypnos/hypnos.toml") == Path("/etc/hypnos/hypnos.models.toml")


def test_put_drop_and_apply(tmp_path: Path) -> None:
    config = tmp_path / "hypnos.toml"
    settings = settings_from_mapping({"models": BASE}, str(config))
    overlay = PoolOverlay(overlay_path(config), ["a", "b"])
    overlay.put(block("c"))
    overlay.put(block("a", slots=3))
    overlay.drop("b")
    overlay.drop("never")
    assert overlay.write() is True
    written = tomllib.loads(overlay_path(config).read_text())
    assert written["removed"] == ["b"] and [m["id"] for m in written["models"]] == ["c", "a"]
    applied, read = load_pool(settings)
    assert [(m.id, m.slots) for m in applied.models] == [("a", 3), ("c", 1)]
    read.put(block("b"))  # re-adding a removed config model takes it off `removed`
    read.drop("c")  # an added model leaves no trace when removed
    assert read.removed == [] and set(read.models) == {"a", "b"}


def test_an_unreadable_overlay_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    config = tmp_path / "hypnos.toml"
    overlay_path(config).write_text("[[models]\n")
    with pytest.raises(ConfigError, match=r"hypnos\.models\.toml"):
        load_pool(settings_from_mapping({"models": BASE}, str(config)))


def test_overlay_blocks_that_fail_the_checks_are_reported_kept_and_not_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "hypnos.toml"
    blocks = [
        block("z", modality="poetry"),
        block("a/b"),  # once accepted: an id no route can address
        block("huge", slots=100_000_000),
        block("fine"),
    ]
    overlay_path(config).write_text(dumps({"overlay_version": 1, "removed": [], "models": blocks}))
    settings, overlay = load_pool(settings_from_mapping({"models": BASE}, str(config)))
    assert [m.id for m in settings.models] == ["a", "b", "fine"]
    assert sorted(overlay.rejected) == ["a/b", "huge", "z"]
    assert "`models[0].modality`" in overlay.rejected["z"] and "`models[0].slots`" in overlay.rejected["huge"]
    assert "`models[0].id`" in overlay.rejected["a/b"]
    reported = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(reported) == 3 and all("not served" in line for line in reported)
    assert any("'a/b'" in line for line in reported)
    assert [m["id"] for m in tomllib.loads(overlay.text())["models"]] == ["z", "a/b", "huge", "fine"]


def test_no_config_file_means_nothing_is_persisted() -> None:
    settings, overlay = load_pool(settings_from_mapping({"models": BASE}))
    overlay.put(block("c"))
    assert overlay.write() is False and [m.id for m in settings.models] == ["a", "b"]


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "f.toml"
    target.write_text("old")
    atomic_write(target, b"new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["f.toml"]
    with pytest.raises(OSError):
        atomic_write(tmp_path / "missing" / "f.toml", b"x")


def test_parse_model_block_wants_one_models_table() -> None:
    assert parse_model_block('[[models]]\nid = "x"\n', "config") == {"id": "x"}
    for text in ('id = "x"\n', "[[models]]\n[[models]]\n", 'port = 1\n[[models]]\nid = "x"\n', "[[models"):
        with pytest.raises(ConfigError):
            parse_model_block(text, "config")


def test_gguf_architecture_from_the_header(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "t.gguf", "qwen2")
    assert gguf_architecture(path) == "qwen2"
    # other keys (an array and a string) before general.architecture are skipped
    name = b"general.architecture"
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 3)
    header += struct.pack("<Q", 3) + b"arr" + struct.pack("<IIQ", 9, 4, 2) + struct.pack("<II", 1, 2)
    header += struct.pack("<Q", 4) + b"name" + struct.pack("<IQ", 8, 3) + b"abc"
    header += struct.pack("<Q", len(name)) + name + struct.pack("<IQ", 8, 5) + b"gemma"
    (tmp_path / "k.gguf").write_bytes(header)
    assert gguf_architecture(tmp_path / "k.gguf") == "gemma"
    (tmp_path / "n.gguf").write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(GgufHeaderError):
        gguf_architecture(tmp_path / "n.gguf")
    (tmp_path / "c.gguf").write_bytes(header[:30])
    with pytest.raises(GgufHeaderError, match="cut short"):
        gguf_architecture(tmp_path / "c.gguf")
