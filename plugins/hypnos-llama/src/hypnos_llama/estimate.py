"""Memory needs of a GGUF model read from its own header: per-layer weights, experts, KV bytes per token."""

from __future__ import annotations

import re

from hypnos.engine import MemoryEstimate

from hypnos_llama.gguf_meta import GgufFile
from hypnos_llama.options import KV_TYPE_BYTES, LlamaOptions

_LAYER = re.compile(r"^blk\.(\d+)\.")
DEFAULT_CONTEXT_CAP = 8192


def _int(value: object, default: int) -> int:
    """A metadata value as int; per-layer arrays (head counts) use their largest entry."""
    if isinstance(value, list):
        return max((int(v) for v in value), default=default)
    if value is None:
        return default
    return int(value)  # type: ignore[call-overload]


def kv_bytes_per_token(gguf: GgufFile, options: LlamaOptions) -> int:
    """K and V bytes one token takes across all attention layers, from heads, head dims and the cache type."""
    n_layer = _int(gguf.arch_value("block_count"), 0)
    n_embd = _int(gguf.arch_value("embedding_length"), 0)
    n_head = _int(gguf.arch_value("attention.head_count"), 1) or 1
    n_head_kv = _int(gguf.arch_value("attention.head_count_kv"), n_head) or n_head
    head_k = _int(gguf.arch_value("attention.key_length"), n_embd // n_head)
    head_v = _int(gguf.arch_value("attention.value_length"), n_embd // n_head)
    k_bytes = KV_TYPE_BYTES.get(options.type_k, 2.0)
    v_bytes = KV_TYPE_BYTES.get(options.type_v, 2.0)
    return round(n_layer * n_head_kv * (head_k * k_bytes + head_v * v_bytes))


def workspace_bytes(gguf: GgufFile, options: LlamaOptions, slots: int) -> int:
    """Compute buffer plus logits outputs for one ubatch: llama.cpp's graph is dominated by the vocab projection."""
    n_embd = _int(gguf.arch_value("embedding_length"), 0)
    n_ff = _int(gguf.arch_value("feed_forward_length"), 4 * n_embd)
    n_vocab = gguf.array_lengths.get("tokenizer.ggml.tokens") or _int(gguf.arch_value("vocab_size"), 32000)
    ubatch = max(1, options.n_ubatch)
    graph = ubatch * (n_vocab + 4 * n_embd + 2 * n_ff) * 4
    outputs = max(slots, 1) * n_vocab * 4
    return graph + outputs


def estimate_gguf(
    gguf: GgufFile, options: LlamaOptions, *, slots: int = 1, projector: GgufFile | None = None
) -> MemoryEstimate:
    """The MemoryEstimate of a GGUF: weights per layer, non-layer weights, experts, KV per token, workspace."""
    n_layer = _int(gguf.arch_value("block_count"), 0)
    layer_bytes = [0] * n_layer
    expert_bytes = [0] * n_layer
    non_layer = 0
    for tensor in gguf.tensors:
        match = _LAYER.match(tensor.name)
        if match is None or int(match.group(1)) >= n_layer:
            non_layer += tensor.nbytes
            continue
        index = int(match.group(1))
        layer_bytes[index] += tensor.nbytes
        if "_exps." in tensor.name or tensor.name.endswith("_exps"):
            expert_bytes[index] += tensor.nbytes
    max_context = _int(gguf.arch_value("context_length"), 0) or None
    default_context = min(DEFAULT_CONTEXT_CAP, max_context or DEFAULT_CONTEXT_CAP)
    projector_bytes = sum(t.nbytes for t in projector.tensors) if projector is not None else 0
    return MemoryEstimate(
        weight_bytes=sum(layer_bytes) + non_layer,
        layer_bytes=layer_bytes,
        non_layer_bytes=non_layer,
        kv_bytes_per_token=kv_bytes_per_token(gguf, options),
        workspace_bytes=workspace_bytes(gguf, options, slots),
        expert_bytes_per_layer=expert_bytes if any(expert_bytes) else [],
        projector_bytes=projector_bytes,
        max_context_len=max_context,
        default_context_len=default_context,
        supports_partial_offload=n_layer > 0,
    )
