"""MoE expert offload (section 6): the expert tensors of the scheduler's cpu_expert_layers stay in host memory and run
on the CPU, through llama.cpp's tensor buffer-type overrides, while the rest of those layers goes to the GPU."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

EXPERT_TENSORS = r"ffn_(up|down|gate|gate_up)_exps"


def expert_layers(n_layers: int, cpu_expert_layers: int) -> list[int]:
    """The layers whose experts the plan keeps on the CPU: the last `cpu_expert_layers` of the model."""
    return list(range(max(0, n_layers - cpu_expert_layers), n_layers)) if cpu_expert_layers > 0 else []


def expert_pattern(layers: list[int]) -> str | None:
    """The regex (searched in tensor names, as llama.cpp does) matching those layers' expert tensors."""
    if not layers:
        return None
    return rf"^blk\.({'|'.join(str(layer) for layer in layers)})\.{EXPERT_TENSORS}"


class _Override(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class CpuExpertOverrides:
    """A NULL-terminated llama_model_tensor_buft_override array sending the matched tensors to the CPU buffer type;
    kept alive by the model that loads with it."""

    def __init__(self, pattern: str, llama_cpp_module: Any) -> None:
        self.pattern = pattern.encode()
        self.array = (_Override * 2)(_Override(self.pattern, cpu_buffer_type(llama_cpp_module)), _Override(None, None))

    @property
    def pointer(self) -> int:
        """The array's address, for llama_model_params.tensor_buft_overrides."""
        return ctypes.addressof(self.array)


def cpu_buffer_type(llama_cpp_module: Any) -> int:
    """ggml's CPU buffer type (host memory), from the libggml-cpu next to the loaded llama.cpp."""
    lib_dir = Path(llama_cpp_module.__file__).parent / "lib"
    candidates = sorted(lib_dir.glob("libggml-cpu.*"), key=lambda path: len(path.name)) or sorted(
        lib_dir.glob("ggml-cpu.*")
    )
    if not candidates:
        raise RuntimeError(f"no ggml CPU library in {lib_dir}: MoE expert offload needs it")
    library = ctypes.CDLL(str(candidates[0]))
    library.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p
    buffer_type = library.ggml_backend_cpu_buffer_type()
    if not buffer_type:
        raise RuntimeError("ggml returned no CPU buffer type")
    return int(buffer_type)
