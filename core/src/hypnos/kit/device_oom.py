"""What each engine library raises when the device runs out of memory, recognized without importing the library;
an engine's `device_oom(error)` names its own, and the host and the lease turn those into 507 device_out_of_memory
(idle models evicted, the call retried once)."""

from __future__ import annotations

import sys

from hypnos.engine import DeviceOutOfMemory
from hypnos.errors import clip

# llama.cpp's llama_decode / llama_encode status for a failed allocation (GGML_STATUS_ALLOC_FAILED); 1 is "no KV
# slot" (a full context, not the device), 2 an abort, -3 any other failure
LLAMA_ALLOC_FAILED = -2
# what ONNX Runtime's arena and CUDA provider and CTranslate2's CUDA allocator put in the message of their failure
ALLOCATION_WORDS = ("failed to allocate memory", "out of memory", "cudaerrormemoryallocation", "bad_alloc")


def out_of_memory(model_id: str, error: BaseException) -> DeviceOutOfMemory:
    """The 507 standing for a library's device OOM (its own words, clipped)."""
    return DeviceOutOfMemory(f"the model `{clip(model_id)}` ran out of device memory: {str(error)[:200]}")


def torch_out_of_memory(error: BaseException) -> bool:
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same class), when torch is loaded."""
    torch = sys.modules.get("torch")
    kind = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return kind is not None and isinstance(error, kind)


def onnxruntime_out_of_memory(error: BaseException) -> bool:
    """ONNX Runtime's RuntimeException / Fail whose message says an allocation failed (its BFC arena, CUDA)."""
    module = type(error).__module__ or ""
    return module.startswith("onnxruntime") and _says_allocation(error)


def ctranslate2_out_of_memory(error: BaseException) -> bool:
    """CTranslate2's failure to allocate: a RuntimeError ("CUDA failed with error out of memory") or a MemoryError
    from std::bad_alloc, raised while a CTranslate2 call ran (the library is loaded)."""
    if "ctranslate2" not in sys.modules:
        return False
    return isinstance(error, MemoryError) or (isinstance(error, RuntimeError) and _says_allocation(error))


def llama_status_out_of_memory(status: int) -> bool:
    """Whether a llama_decode / llama_encode status is llama.cpp's failed allocation."""
    return status == LLAMA_ALLOC_FAILED


def llama_cpp_out_of_memory(error: BaseException) -> bool:
    """llama-cpp-python's RuntimeError("llama_decode returned -2") (and llama_encode's)."""
    text = str(error)
    return (
        isinstance(error, RuntimeError)
        and text.startswith("llama_")
        and text.endswith(f"returned {LLAMA_ALLOC_FAILED}")
    )


def _says_allocation(error: BaseException) -> bool:
    text = str(error).lower()
    return any(words in text for words in ALLOCATION_WORDS)
