"""An engine kind declares the API's EngineKind it is reported as; the wire never carries another value."""

from __future__ import annotations

import pytest
from hypnos.engine import EngineKind
from hypnos.types import Modality
from hypnos.wire_kind import SPEC_KIND_BY_MODALITY, wire_engine

# The appendix's EngineKind list, copied from the API reference.
APPENDIX_ENGINE_KINDS = {"ggml_llama", "ggml_whisper", "ggml_diffusion", "onnx_runtime", "docling", "gliner"}
SPEECH = frozenset({Modality.TEXT_TO_SPEECH})


def factory(model, context):  # type: ignore[no-untyped-def]
    raise AssertionError("never built")


def test_a_kind_named_outside_the_list_must_declare_its_spec_kind() -> None:
    with pytest.raises(ValueError, match="must declare spec_kind"):
        EngineKind("piper", SPEECH, factory)
    with pytest.raises(ValueError, match="must declare spec_kind"):
        EngineKind("piper", SPEECH, factory, spec_kind="onnx")
    with pytest.raises(ValueError, match="must declare spec_kind"):
        EngineKind("any", SPEECH, factory, spec_kind={Modality.TEXT_TO_SPEECH: "tts"})


def test_the_declared_kind_and_backend_are_what_the_wire_reports() -> None:
    kinds = {
        "piper": EngineKind("piper", SPEECH, factory, spec_kind="onnx_runtime"),
        "onnx_runtime": EngineKind("onnx_runtime", SPEECH, factory, backend="kokoro_onnx"),
        "docling": EngineKind("docling", frozenset({Modality.DOCUMENT_CONVERSION}), factory),
    }
    assert wire_engine("piper", "text_to_speech", kinds) == ("onnx_runtime", "piper")
    assert wire_engine("onnx_runtime", "text_to_speech", kinds) == ("onnx_runtime", "kokoro_onnx")
    assert wire_engine("docling", "document_conversion", kinds) == ("docling", "docling")


def test_a_kind_not_installed_is_reported_as_its_modality_s_spec_kind() -> None:
    assert wire_engine("faster_whisper", "speech_to_text", {}) == ("ggml_whisper", "faster_whisper")
    assert wire_engine("diffusers", "image_generation", {}) == ("ggml_diffusion", "diffusers")
    assert wire_engine("ggml_llama", "embeddings", {}) == ("ggml_llama", "ggml_llama")
    assert wire_engine("mystery", "not-a-modality", {})[0] in APPENDIX_ENGINE_KINDS
    assert set(SPEC_KIND_BY_MODALITY) == set(Modality)
    assert set(SPEC_KIND_BY_MODALITY.values()) <= APPENDIX_ENGINE_KINDS


def test_a_kind_standing_in_for_several_maps_each_modality() -> None:
    kind = EngineKind("fake", frozenset(Modality), factory, spec_kind=SPEC_KIND_BY_MODALITY)
    assert wire_engine("fake", "image_generation", {"fake": kind}) == ("ggml_diffusion", "fake")
    assert wire_engine("fake", "entity_extraction", {"fake": kind}) == ("gliner", "fake")
