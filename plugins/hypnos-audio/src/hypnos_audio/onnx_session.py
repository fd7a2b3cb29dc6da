"""ONNX Runtime at run time: which distribution is installed, which providers to ask for, and what the session got."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from typing import Any

from hypnos.engine import EngineUnavailable

logger = logging.getLogger(__name__)

CPU_DISTRIBUTION = "onnxruntime"
GPU_DISTRIBUTION = "onnxruntime-gpu"
CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def installed_distribution() -> str:
    """`onnxruntime` or `onnxruntime-gpu`; a clear EngineUnavailable when neither or both are installed."""
    cpu, gpu = _installed(CPU_DISTRIBUTION), _installed(GPU_DISTRIBUTION)
    if cpu and gpu:
        raise EngineUnavailable(
            "both `onnxruntime` and `onnxruntime-gpu` are installed; they share one folder and break each other "
            "(pip uninstall -y onnxruntime onnxruntime-gpu, "
            "then pip install 'hypnos-audio[cpu]' or 'hypnos-audio[cuda]')"
        )
    if not (cpu or gpu) or importlib.util.find_spec("onnxruntime") is None:
        raise EngineUnavailable(
            "the engine library `onnxruntime` is not installed "
            "(pip install 'hypnos-audio[cpu]', or 'hypnos-audio[cuda]' for onnxruntime-gpu)"
        )
    return GPU_DISTRIBUTION if gpu else CPU_DISTRIBUTION


def wanted_providers(device: str, available: list[str], distribution: str) -> list[str]:
    """The providers to ask for: CUDA first when the device allows it and the GPU build offers it, else CPU."""
    if device == "cpu":
        return [CPU_PROVIDER]
    cuda_ready = distribution == GPU_DISTRIBUTION and CUDA_PROVIDER in available
    if device == "cuda" and not cuda_ready:
        raise EngineUnavailable(
            f'device = "cuda" needs `onnxruntime-gpu` with the CUDA provider (installed: {distribution}, '
            f"providers: {', '.join(available)})"
        )
    return [CUDA_PROVIDER, CPU_PROVIDER] if cuda_ready else [CPU_PROVIDER]


def create_session(model: bytes, device: str, threads: int, name: str, spin: bool = True) -> Any:
    """An InferenceSession from the model bytes with `threads` intra-op threads (0: ONNX Runtime's default) that spin
    between runs only when `spin`, with the CUDA provider verified active when it was asked for."""
    distribution = installed_distribution()
    import onnxruntime

    providers = wanted_providers(device, onnxruntime.get_available_providers(), distribution)
    options = onnxruntime.SessionOptions()
    if threads > 0:
        options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    session = onnxruntime.InferenceSession(model, sess_options=options, providers=providers)
    active = session.get_providers()
    if CUDA_PROVIDER in providers and CUDA_PROVIDER not in active:
        # onnxruntime-gpu silently falls back to the CPU when the CUDA libraries cannot be loaded
        if device == "cuda":
            raise EngineUnavailable(f"{name}: the CUDA provider did not start (active providers: {', '.join(active)})")
        logger.warning("%s: the CUDA provider did not start; running on %s", name, ", ".join(active))
    logger.info("%s: ONNX Runtime session on %s", name, ", ".join(active))
    return session


def active_device(session: Any) -> str:
    """`cuda` when the session's first provider is CUDA, else `cpu`."""
    providers = session.get_providers()
    return "cuda" if providers and providers[0] == CUDA_PROVIDER else "cpu"
