"""Pieces that need no weights: phrase and phoneme splitting, runtime detection, options, error messages."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import EngineContext, EngineUnavailable
from hypnos.types import Modality
from hypnos_audio import onnx_session, plugin
from hypnos_audio.kokoro import trim_silence
from hypnos_audio.options import KokoroOptions, PiperOptions, WhisperOptions
from hypnos_audio.phonemes import group_phrases, split_phonemes, split_phrases
from hypnos_audio.whisper import whisper_language


def test_split_phrases_cuts_sentences_and_long_clauses() -> None:
    text = "Hello there.  How are you?\nFine!  " + ", ".join(["a fairly long clause of words"] * 20) + "."
    phrases = split_phrases(text)
    assert phrases[:3] == ["Hello there.", "How are you?", "Fine!"]
    assert len(phrases) > 4
    assert all(len(p) <= 300 for p in phrases)
    assert split_phrases("   \n ") == []


def test_group_phrases_starts_small_and_grows() -> None:
    phrases = [f"Sentence number {i} is here." for i in range(12)]
    chunks = group_phrases(phrases, max_chars=100)
    assert chunks[0] == phrases[0]
    assert " ".join(chunks) == " ".join(phrases)
    assert all(len(c) <= 100 for c in chunks)
    assert [len(c) for c in chunks[:3]] == sorted(len(c) for c in chunks[:3])
    assert len(chunks) < len(phrases)
    assert group_phrases(phrases, max_chars=0) == phrases


def test_split_phonemes_respects_the_limit() -> None:
    phonemes = ("helo\u02c8u w\u02c8\u025c\u02d0ld, " * 80).strip()
    pieces = split_phonemes(phonemes, limit=100)
    assert all(0 < len(p) <= 100 for p in pieces)
    assert "".join(pieces).replace(" ", "") == phonemes.replace(" ", "")
    assert split_phonemes("abc") == ["abc"]


def test_trim_silence_keeps_the_sound() -> None:
    sound = np.concatenate([np.zeros(12000), np.ones(6000) * 0.3, np.zeros(12000)]).astype(np.float32)
    trimmed = trim_silence(sound)
    assert 6000 <= len(trimmed) < 6000 + 2 * 2048
    assert trim_silence(np.zeros(0, dtype=np.float32)).size == 0


def test_whisper_language_codes() -> None:
    assert whisper_language("en-US") == "en"
    assert whisper_language(" IT ") == "it"
    assert whisper_language("") is None and whisper_language(None) is None


@pytest.mark.parametrize(("cpu", "gpu", "expected"), [(True, False, "onnxruntime"), (False, True, "onnxruntime-gpu")])
def test_runtime_detection(monkeypatch: pytest.MonkeyPatch, cpu: bool, gpu: bool, expected: str) -> None:
    monkeypatch.setattr(onnx_session, "_installed", lambda name: {"onnxruntime": cpu, "onnxruntime-gpu": gpu}[name])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert onnx_session.installed_distribution() == expected


def test_runtime_detection_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_session, "_installed", lambda name: True)
    with pytest.raises(EngineUnavailable, match="both `onnxruntime` and `onnxruntime-gpu`"):
        onnx_session.installed_distribution()
    monkeypatch.setattr(onnx_session, "_installed", lambda name: False)
    with pytest.raises(EngineUnavailable, match=r"hypnos-audio\[cpu\]") as caught:
        onnx_session.installed_distribution()
    assert caught.value.status == 503


def test_providers() -> None:
    both = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert onnx_session.wanted_providers("auto", both, "onnxruntime-gpu") == both
    assert onnx_session.wanted_providers("auto", both, "onnxruntime") == ["CPUExecutionProvider"]
    assert onnx_session.wanted_providers("cpu", both, "onnxruntime-gpu") == ["CPUExecutionProvider"]
    with pytest.raises(EngineUnavailable, match="onnxruntime-gpu"):
        onnx_session.wanted_providers("cuda", ["CPUExecutionProvider"], "onnxruntime")


def _model(engine: str, **extra: object) -> ModelConfig:
    modality = Modality.TEXT_TO_SPEECH if engine == "kokoro_onnx" else Modality.SPEECH_TO_TEXT
    return msgspec.convert(
        {"id": "m", "modality": modality, "engine": engine, "weights_path": "w", "voices_path": "v.npz", **extra},
        ModelConfig,
    )


def test_missing_library_errors_name_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    context = EngineContext(models_dir=tmp_path, limits=LimitsConfig())
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "faster_whisper" else real(name))
    expected = r"`faster-whisper` is not installed \(pip install 'hypnos-audio\[whisper\]'"
    with pytest.raises(EngineUnavailable, match=expected):
        plugin.make_whisper_engine(_model("faster_whisper"), context)
    monkeypatch.setattr(onnx_session, "installed_distribution", lambda: "onnxruntime")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "phonemizer" else real(name))
    with pytest.raises(EngineUnavailable, match=r"phonemizer.*hypnos-audio\[cpu\]"):
        plugin.make_kokoro_engine(_model("kokoro_onnx"), context)


def test_missing_onnxruntime_makes_the_model_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    context = EngineContext(models_dir=tmp_path, limits=LimitsConfig())
    monkeypatch.setattr(onnx_session, "_installed", lambda name: False)
    with pytest.raises(EngineUnavailable, match=r"`onnxruntime` is not installed.*hypnos-audio\[cpu\]") as caught:
        plugin.make_kokoro_engine(_model("kokoro_onnx"), context)
    assert caught.value.status == 503 and caught.value.type == "model_not_available"


def test_engine_kinds_and_options() -> None:
    kinds = {kind.name: kind for kind in plugin.hypnos_engine_kinds()}
    assert set(kinds) == {"kokoro_onnx", "onnx_runtime", "piper", "faster_whisper"}
    assert kinds["kokoro_onnx"].modalities == kinds["piper"].modalities == {Modality.TEXT_TO_SPEECH}
    assert kinds["piper"].options == {"piper": PiperOptions}
    assert kinds["faster_whisper"].options == {"whisper": WhisperOptions}
    assert kinds["kokoro_onnx"].options == kinds["onnx_runtime"].options == {"kokoro": KokoroOptions}
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({"voice": "x"}, KokoroOptions)


def test_engine_kinds_declare_the_api_kind_and_their_backend() -> None:
    # the wire's `engine` is the API appendix's closed EngineKind; the concrete engine is `backend`
    kinds = {kind.name: kind for kind in plugin.hypnos_engine_kinds()}
    reported = {name: (kind.wire_kind(Modality.TEXT_TO_SPEECH), kind.wire_backend) for name, kind in kinds.items()}
    assert reported == {
        "kokoro_onnx": ("onnx_runtime", "kokoro_onnx"),
        "onnx_runtime": ("onnx_runtime", "kokoro_onnx"),
        "piper": ("onnx_runtime", "piper"),
        "faster_whisper": ("ggml_whisper", "faster_whisper"),
    }


def test_ct2_header_reader(tmp_path: Path) -> None:
    from hypnos_audio import ct2_model

    def variable(name: str, dims: list[int], dtype: int, data: bytes) -> bytes:
        raw = name.encode() + b"\0"
        head = struct.pack("<H", len(raw)) + raw + struct.pack("<B", len(dims)) + struct.pack(f"<{len(dims)}I", *dims)
        return head + struct.pack("<BI", dtype, len(data)) + data

    spec = b"WhisperSpec\0"
    body = variable("w", [4, 2], ct2_model.FLOAT16, bytes(16)) + variable("n", [], ct2_model.INT8, b"\x03")
    path = tmp_path / "model.bin"
    path.write_bytes(struct.pack("<IH", 6, len(spec)) + spec + struct.pack("<II", 3, 2) + body)
    assert ct2_model.bytes_by_type(path) == {ct2_model.FLOAT16: 16, ct2_model.INT8: 1}
    assert ct2_model.resident_bytes(path, "default", "cpu") == 33
    assert ct2_model.resident_bytes(path, "default", "cuda") == 17
    assert ct2_model.resident_bytes(path, "int8", "cpu") == 9
    path.write_bytes(struct.pack("<I", 3))
    assert ct2_model.resident_bytes(path, "default", "cpu") is None


@pytest.mark.parametrize(
    ("tables", "needle"),
    [("[models.kokoro]\nspeeed = 1.2\n", "[models.kokoro] key `speeed`"), ("[models.kokoroo]\n", "[models.kokoroo]")],
)
def test_bad_kokoro_table_stops_serve_with_one_line(tmp_path: Path, capsys, tables: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    from hypnos_server import cli

    path = tmp_path / "bad.toml"
    path.write_text(f'[[models]]\nid = "kokoro-82m"\nmodality = "text_to_speech"\nengine = "kokoro_onnx"\n{tables}')
    assert cli.main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "`kokoro-82m`" in err and needle in err, err


def test_a_negative_piper_noise_stops_serve_with_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from hypnos_server import cli

    path = tmp_path / "bad.toml"
    model = '[[models]]\nid = "joe"\nmodality = "text_to_speech"\nengine = "piper"\n'
    path.write_text(f"{model}[models.piper]\nnoise_scale = -0.5\n")
    assert cli.main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`joe`" in err and "noise_scale" in err and ">= 0" in err, err
