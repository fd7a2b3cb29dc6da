"""Test kit for rerankers: a tiny random-weight BERT cross-encoder folder (what transformers saves for a
BertForSequenceClassification), converted to a GGUF by the same converter a real one goes through."""

from __future__ import annotations

import json
from pathlib import Path

# llama.cpp's BERT vocabulary defaults: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
SPECIALS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
WORDS = (
    "the a is of and in on paris capital france berlin germany rome italy city river cat dog sat mat "
    "bread food eating man stock market fell what which where"
).split()


def cross_encoder_vocab() -> list[str]:
    """The tokens in id order: the specials where llama.cpp expects them, fillers, then whole lowercase words."""
    tokens = [SPECIALS.get(index, f"[unused{index}]") for index in range(104)]
    return tokens + WORDS


def write_tiny_cross_encoder(folder: Path, *, hidden: int = 32, layers: int = 2, heads: int = 2, seed: int = 0) -> Path:
    """Write config.json, vocab.txt and model.safetensors of a random BertForSequenceClassification (one logit)."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    vocab = cross_encoder_vocab()
    positions, intermediate = 128, hidden * 2

    def normal(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.weight": 1.0 + normal(hidden, scale=0.1), f"{prefix}.bias": normal(hidden, scale=0.1)}

    weights = {
        "bert.embeddings.word_embeddings.weight": normal(len(vocab), hidden, scale=1.0),
        "bert.embeddings.position_embeddings.weight": normal(positions, hidden),
        "bert.embeddings.token_type_embeddings.weight": normal(2, hidden),
        **norm("bert.embeddings.LayerNorm"),
        "bert.pooler.dense.weight": normal(hidden, hidden, scale=0.5),
        "bert.pooler.dense.bias": normal(hidden),
        "classifier.weight": normal(1, hidden, scale=1.0),
        "classifier.bias": normal(1),
    }
    for index in range(layers):
        prefix = f"bert.encoder.layer.{index}"
        for name, (rows, cols) in {
            "attention.self.query": (hidden, hidden),
            "attention.self.key": (hidden, hidden),
            "attention.self.value": (hidden, hidden),
            "attention.output.dense": (hidden, hidden),
            "intermediate.dense": (intermediate, hidden),
            "output.dense": (hidden, intermediate),
        }.items():
            weights[f"{prefix}.{name}.weight"] = normal(rows, cols)
            weights[f"{prefix}.{name}.bias"] = normal(rows, scale=0.05)
        weights.update(norm(f"{prefix}.attention.output.LayerNorm"))
        weights.update(norm(f"{prefix}.output.LayerNorm"))
    config = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": intermediate,
        "max_position_embeddings": positions,
        "type_vocab_size": 2,
        "vocab_size": len(vocab),
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        "id2label": {"0": "LABEL_0"},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    save_file(weights, str(folder / "model.safetensors"))
    return folder


def cross_encoder_ids(query: str, document: str) -> list[int]:
    """The token ids llama.cpp's server feeds a BERT reranker for a pair of whole-word texts: [CLS] q [SEP] d."""
    vocab = cross_encoder_vocab()
    return [101, *(vocab.index(word) for word in query.split()), 102, *(vocab.index(word) for word in document.split())]
