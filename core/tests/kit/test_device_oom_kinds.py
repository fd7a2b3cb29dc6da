"""What each engine library raises when the device is out of memory is recognized, and nothing else is: a full
context, a bad input or another library's error stays what it is."""

from __future__ import annotations

import sys
import types

import pytest
from hypnos.kit.device_oom import (
    ctranslate2_out_of_memory,
    llama_cpp_out_of_memory,
    llama_status_out_of_memory,
    onnxruntime_out_of_memory,
    out_of_memory,
    torch_out_of_memory,
)


def library(monkeypatch: pytest.MonkeyPatch, name: str, **attributes: object) -> None:
    """A stand-in for a loaded library module (sys.modules), with the given attributes."""
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


def test_torch_out_of_memory_is_its_own_class_only(monkeypatch: pytest.MonkeyPatch) -> None:
    class OutOfMemoryError(RuntimeError):
        pass

    library(monkeypatch, "torch", OutOfMemoryError=OutOfMemoryError)
    assert torch_out_of_memory(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not torch_out_of_memory(RuntimeError("CUDA out of memory"))  # another error with the same words


def test_without_torch_loaded_nothing_is_its_oom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert not torch_out_of_memory(MemoryError())


def test_onnxruntime_failed_allocation_is_recognized_by_its_module_and_words() -> None:
    RuntimeException = type("RuntimeException", (RuntimeError,), {"__module__": "onnxruntime.capi.pybind11_state"})
    arena = "BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 268435456"
    assert onnxruntime_out_of_memory(RuntimeException(arena))
    assert onnxruntime_out_of_memory(RuntimeException("CUDA failure 2: out of memory ; GPU=0"))
    assert not onnxruntime_out_of_memory(RuntimeException("Invalid input name: tokens"))
    assert not onnxruntime_out_of_memory(RuntimeError(arena))  # not raised by ONNX Runtime


def test_ctranslate2_out_of_memory_needs_the_library_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    error = RuntimeError("CUDA failed with error out of memory")
    monkeypatch.delitem(sys.modules, "ctranslate2", raising=False)
    assert not ctranslate2_out_of_memory(error)
    library(monkeypatch, "ctranslate2")
    assert ctranslate2_out_of_memory(error) and ctranslate2_out_of_memory(MemoryError())
    assert not ctranslate2_out_of_memory(RuntimeError("unsupported compute type int8_float16"))


def test_llama_cpp_failed_allocation_is_status_minus_two_only() -> None:
    assert llama_status_out_of_memory(-2)
    assert not any(llama_status_out_of_memory(status) for status in (0, 1, 2, -1, -3))  # full context, abort, ...
    assert llama_cpp_out_of_memory(RuntimeError("llama_decode returned -2"))
    assert not llama_cpp_out_of_memory(RuntimeError("llama_decode returned 1"))


def test_the_507_names_the_model_and_keeps_the_library_words_short() -> None:
    error = out_of_memory("chat", RuntimeError("CUDA out of memory " + "x" * 500))
    assert (error.status, error.type) == (507, "device_out_of_memory")
    assert "`chat`" in error.message and len(error.message) < 300
