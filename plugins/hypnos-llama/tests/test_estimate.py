"""Memory estimates come from the GGUF header: layers, KV bytes per token, experts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypnos_llama.estimate import estimate_gguf
from hypnos_llama.gguf_meta import read_gguf
from hypnos_llama.options import LlamaOptions


def test_tiny_llama_estimate(tiny_gguf: Path) -> None:
    gguf = read_gguf(tiny_gguf)
    estimate = estimate_gguf(gguf, LlamaOptions(), slots=4)
    assert estimate.num_layers == 2
    per_layer = {i: sum(t.nbytes for t in gguf.tensors if t.name.startswith(f"blk.{i}.")) for i in range(2)}
    assert estimate.layer_bytes == [per_layer[0], per_layer[1]]
    assert estimate.weight_bytes == sum(t.nbytes for t in gguf.tensors)
    assert estimate.non_layer_bytes == estimate.weight_bytes - sum(estimate.layer_bytes)
    # 2 layers x 2 KV heads x (16 + 16) dims x 2 bytes (f16)
    assert estimate.kv_bytes_per_token == 2 * 2 * 32 * 2
    assert estimate.expert_bytes == 0
    assert estimate.max_context_len == 4096
    assert estimate.workspace_bytes > 0
    q8 = estimate_gguf(gguf, LlamaOptions(type_k="q8_0", type_v="q8_0"))
    assert q8.kv_bytes_per_token < estimate.kv_bytes_per_token


def test_expert_tensors_are_counted_per_layer(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "moe.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen3moe")
    writer.add_block_count(2)
    writer.add_embedding_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv(4)
    writer.add_context_length(1024)
    writer.add_tensor("token_embd.weight", np.zeros((10, 32), dtype=np.float32))
    for i in range(2):
        writer.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((32, 32), dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_up_exps.weight", np.zeros((4, 16, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    estimate = estimate_gguf(read_gguf(path), LlamaOptions())
    assert len(estimate.expert_bytes_per_layer) == 2
    assert all(b >= 4 * 16 * 32 * 4 for b in estimate.expert_bytes_per_layer)
    pairs = zip(estimate.layer_bytes, estimate.expert_bytes_per_layer, strict=True)
    assert all(layer > expert for layer, expert in pairs)
