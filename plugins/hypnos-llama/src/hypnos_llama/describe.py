"""`hypnos add` / `hypnos show` for GGUF files: a `[[models]]` block's defaults and the file facts, from the
GGUF's own metadata (headers only, no llama.cpp)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.types import Modality

from hypnos_llama.gguf_meta import GgufError, GgufFile, read_gguf

# the context a model added from a file gets when its trained context is longer (each slot allocates it)
DEFAULT_CONTEXT = 8192
# llama.cpp's pooling types: a file that declares one (other than none) serves embeddings (rank: a reranker)
_POOLING = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


def quantization(gguf: GgufFile) -> str | None:
    """general.file_type as llama.cpp names it (Q4_K_M, F16, ...)."""
    kind = gguf.metadata.get("general.file_type")
    if not isinstance(kind, int):
        return None
    import gguf as gguf_py

    try:
        return gguf_py.LlamaFileType(kind).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"file type {kind}"


def is_projector(gguf: GgufFile) -> bool:
    """A multimodal projector (mmproj), not a model of its own."""
    return gguf.metadata.get("general.type") == "mmproj" or gguf.arch == "clip"


def projector_modalities(gguf: GgufFile) -> list[str]:
    """What a projector adds to a chat model: vision, speech_to_text."""
    added = []
    if gguf.metadata.get("clip.has_vision_encoder", True):
        added.append(Modality.VISION.value)
    if gguf.metadata.get("clip.has_audio_encoder"):
        added.append(Modality.SPEECH_TO_TEXT.value)
    return added


def facts_of(gguf: GgufFile) -> dict[str, Any]:
    """The facts `hypnos show` prints for one GGUF."""
    pooling = gguf.arch_value("pooling_type")
    facts: dict[str, Any] = {
        "format": f"GGUF v{gguf.version}",
        "name": gguf.metadata.get("general.name"),
        "architecture": gguf.arch,
        "parameters": gguf.metadata.get("general.size_label"),
        "quantization": quantization(gguf),
        "context": gguf.arch_value("context_length"),
        "layers": gguf.arch_value("block_count"),
        "embedding_length": gguf.arch_value("embedding_length"),
        "pooling": _POOLING.get(pooling, pooling) if pooling is not None else None,
        "chat_template": gguf.chat_template,
        "file_bytes": gguf.path.stat().st_size,
    }
    return {key: value for key, value in facts.items() if value is not None}


def _pick(folder: Path) -> tuple[Path | None, Path | None]:
    """The model GGUF and the projector GGUF of a folder (the largest of each)."""
    models: list[Path] = []
    projectors: list[Path] = []
    for path in sorted(folder.glob("*.gguf"), key=lambda p: p.stat().st_size, reverse=True):
        try:
            (projectors if is_projector(read_gguf(path)) else models).append(path)
        except (OSError, GgufError):
            continue
    return (models[0] if models else None), (projectors[0] if projectors else None)


def describe(path: Path) -> dict[str, Any] | None:
    """The block defaults and facts of a GGUF file, or of a folder holding one (and maybe its projector)."""
    projector = None
    if path.is_dir():
        found, projector = _pick(path)
        if found is None:
            return None
        path = found
    elif path.suffix.lower() != ".gguf":
        return None
    try:
        gguf = read_gguf(path)
    except (OSError, GgufError):
        return None
    if is_projector(gguf):
        return {
            "block": None,
            "facts": facts_of(gguf),
            "problem": f"{path.name} is a multimodal projector: name it as `aux_path` of its chat model "
            "(or add the folder holding both)",
        }
    facts = facts_of(gguf)
    pooling = gguf.arch_value("pooling_type")
    embeddings = pooling not in (None, 0) or (gguf.chat_template is None and "bert" in gguf.arch)
    block: dict[str, Any] = {
        "modality": (Modality.EMBEDDINGS if embeddings else Modality.TEXT_GENERATION).value,
        "engine": "ggml_llama",
        "weights_path": str(path),
    }
    trained = facts.get("context")
    if isinstance(trained, int) and trained > 0:
        block["context_len"] = min(trained, DEFAULT_CONTEXT)
    if projector is not None and not embeddings:
        block["aux_path"] = str(projector)
        block["modalities"] = projector_modalities(read_gguf(projector))
        facts["projector"] = projector.name
    return {"block": block, "facts": facts}
