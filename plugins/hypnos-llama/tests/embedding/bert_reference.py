"""An independent numpy forward pass of a sentence-transformers BERT (HF tokenizer, mean pooling, normalize)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _weights(model_dir: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return {
        k.removeprefix("bert."): v.astype(np.float64)
        for k, v in load_file(str(model_dir / "model.safetensors")).items()
    }


def _encode(w: dict[str, np.ndarray], config: dict, ids: list[int]) -> np.ndarray:
    """The last hidden states of one token sequence (every token in segment 0, as llama.cpp reads BERT)."""
    heads = config["num_attention_heads"]
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def dense(h: np.ndarray, name: str, prefix: str = p) -> np.ndarray:
            return h @ w[prefix + name + ".weight"].T + w[prefix + name + ".bias"]

        q, k, v = (
            dense(x, f"attention.self.{m}").reshape(n, heads, -1).transpose(1, 0, 2) for m in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attn = (scores / scores.sum(-1, keepdims=True)) @ v
        attn = attn.transpose(1, 0, 2).reshape(n, -1)
        x = _layer_norm(
            x + dense(attn, "attention.output.dense"),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        h = _gelu(dense(x, "intermediate.dense"))
        x = _layer_norm(x + dense(h, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    return x


def reference_embeddings(model_dir: Path, texts: list[str], max_length: int = 256) -> np.ndarray:
    """Mean-pooled, L2-normalized sentence embeddings computed from the safetensors weights with numpy."""
    import json

    from tokenizers import Tokenizer

    config = json.loads((model_dir / "config.json").read_text())
    w = _weights(model_dir)
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    out = []
    for text in texts:
        pooled = _encode(w, config, tokenizer.encode(text).ids[:max_length]).mean(0)
        out.append(pooled / np.linalg.norm(pooled))
    return np.array(out)


def reference_rerank_scores(model_dir: Path, sequences: list[list[int]]) -> np.ndarray:
    """A BertForSequenceClassification's logit per token sequence: classifier(tanh(pooler([CLS] state)))."""
    import json

    config = json.loads((model_dir / "config.json").read_text())
    w = _weights(model_dir)
    out = []
    for ids in sequences:
        pooled = np.tanh(_encode(w, config, ids)[0] @ w["pooler.dense.weight"].T + w["pooler.dense.bias"])
        out.append(float((pooled @ w["classifier.weight"].T + w["classifier.bias"])[0]))
    return np.array(out)
