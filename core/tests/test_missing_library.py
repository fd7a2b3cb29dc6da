"""missing_library() names what to install: pip's command, or the engine kind's own hint (a program from apt)."""

from __future__ import annotations

from hypnos.engine import EngineKind, missing_library
from hypnos.testing.fake_engine import FakeEngine
from hypnos.types import Modality

ESPEAK = EngineKind(
    "espeaky",
    frozenset({Modality.TEXT_TO_SPEECH}),
    FakeEngine,
    spec_kind="onnx_runtime",
    install_hints={"espeak-ng": "apt-get install espeak-ng"},
)


def test_the_kinds_hint_names_the_program_from_apt() -> None:
    error = missing_library("espeak-ng", kind=ESPEAK)
    assert (error.status, error.type) == (503, "model_not_available")
    assert error.message == "the engine library `espeak-ng` is not installed (apt-get install espeak-ng)"


def test_without_a_hint_it_is_pip() -> None:
    assert "(pip install numpy)" in missing_library("numpy", kind=ESPEAK).message
    assert "(pip install 'hypnos-audio[cpu]')" in missing_library("onnxruntime", "hypnos-audio[cpu]").message
