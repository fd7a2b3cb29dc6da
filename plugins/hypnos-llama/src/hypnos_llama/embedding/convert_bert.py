"""Converts a local sentence-transformers BERT folder (safetensors + WordPiece vocab) into a GGUF llama.cpp serves;
a BERT cross-encoder (BertForSequenceClassification) becomes a reranker GGUF (rank pooling, its head as `cls`).

Offline and without torch: numpy, safetensors and the `gguf` package. Mirrors what llama.cpp's convert_hf_to_gguf.py
does for BertModel (phantom-space vocab, tensor names from gguf's name map, mean/CLS pooling from the
sentence-transformers pooling config), and records whether vectors are normalized.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

NORMALIZE_KEY = "hypnos.embedding.normalize"
MAX_SEQUENCE_KEY = "hypnos.embedding.max_seq_length"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def is_cross_encoder(config: dict) -> bool:
    """A BERT reranker (cross-encoder): a sequence classifier, scored by llama.cpp's rank pooling."""
    return "BertForSequenceClassification" in (config.get("architectures") or [])


# A cross-encoder's head as llama.cpp runs it under rank pooling: `cls` (dense + tanh on the [CLS] state, BERT's
# pooler) then `cls.output` (the classifier), so the score is the logit transformers computes.
HEAD_TENSORS = {
    "pooler.dense.weight": "cls.weight",
    "pooler.dense.bias": "cls.bias",
    "classifier.weight": "cls.output.weight",
    "classifier.bias": "cls.output.bias",
}


def _pooling(model_dir: Path):
    """The llama.cpp pooling type of a sentence-transformers folder (mean when unspecified; rank for a reranker)."""
    import gguf

    if is_cross_encoder(_read_json(model_dir / "config.json")):
        return gguf.PoolingType.RANK
    config = _read_json(model_dir / "1_Pooling" / "config.json")
    if config.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    return gguf.PoolingType.MEAN


def _normalizes(model_dir: Path) -> bool:
    """True when the sentence-transformers pipeline ends with a Normalize module."""
    modules = json.loads((model_dir / "modules.json").read_text()) if (model_dir / "modules.json").exists() else []
    return any(str(m.get("type", "")).endswith("Normalize") for m in modules)


def _vocab(model_dir: Path) -> tuple[list[str], list[int]]:
    """Tokens in id order in llama.cpp's phantom-space form, and their token types."""
    import gguf

    tokens = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    texts: list[str] = []
    types: list[int] = []  # gguf.TokenType values
    for token in tokens:
        if token in SPECIAL_TOKENS:
            texts.append(token)
            types.append(gguf.TokenType.CONTROL)
        elif token.startswith("##"):
            texts.append(token[2:])
            types.append(gguf.TokenType.NORMAL)
        else:
            texts.append("\u2581" + token)
            types.append(gguf.TokenType.NORMAL)
    return texts, types


WEIGHT_TYPES = ("f32", "f16", "bf16")


def _matrix_data(array, weight_type: str):
    """A matmul weight in the chosen type: (data, raw_dtype for add_tensor)."""
    import gguf
    import numpy as np

    if weight_type == "bf16":
        qtype = gguf.GGMLQuantizationType.BF16
        return gguf.quants.quantize(array.astype(np.float32), qtype), qtype
    return array.astype(np.float16 if weight_type == "f16" else np.float32), None


def convert_bert(model_dir: Path, out_path: Path, *, weight_type: str = "f16") -> Path:
    """Write `out_path` (atomically: temp file, fsync, rename) from a sentence-transformers BERT folder; matmul
    weights in `weight_type` (f32, f16 or bf16), the rest in f32."""
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight_type must be one of {WEIGHT_TYPES}, not {weight_type!r}")
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    config = _read_json(model_dir / "config.json")
    if config.get("model_type") != "bert":
        raise ValueError(f"{model_dir}: only BERT models convert here (model_type={config.get('model_type')!r})")
    blocks = int(config["num_hidden_layers"])
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, blocks)
    weights = load_file(str(model_dir / "model.safetensors"))

    out_path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=out_path.name, suffix=".part", dir=out_path.parent)
    os.close(handle)
    try:
        writer = gguf.GGUFWriter(temp_name, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
        writer.add_name(config.get("_name_or_path") or model_dir.name)
        writer.add_context_length(int(config["max_position_embeddings"]))
        writer.add_embedding_length(int(config["hidden_size"]))
        writer.add_feed_forward_length(int(config["intermediate_size"]))
        writer.add_block_count(blocks)
        writer.add_head_count(int(config["num_attention_heads"]))
        writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
        writer.add_causal_attention(False)
        writer.add_pooling_type(_pooling(model_dir))
        file_types = {
            "f32": gguf.LlamaFileType.ALL_F32,
            "f16": gguf.LlamaFileType.MOSTLY_F16,
            "bf16": gguf.LlamaFileType.MOSTLY_BF16,
        }
        writer.add_file_type(file_types[weight_type])
        writer.add_bool(NORMALIZE_KEY, _normalizes(model_dir))
        max_seq = _read_json(model_dir / "sentence_bert_config.json").get("max_seq_length")
        if max_seq:
            writer.add_uint32(MAX_SEQUENCE_KEY, int(max_seq))

        tokens, types = _vocab(model_dir)
        writer.add_tokenizer_model("bert")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_type_count(int(config.get("type_vocab_size", 1)))
        gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(writer)

        head = HEAD_TENSORS if is_cross_encoder(config) else {}
        for name, array in weights.items():
            name = name.removeprefix("bert.")
            if name in head:
                writer.add_tensor(head[name], array.astype(np.float32))
                continue
            if name == "embeddings.position_ids" or name.startswith(("pooler.", "cls.", "classifier.")):
                continue
            mapped = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
            if mapped is None:
                raise ValueError(f"{model_dir}: cannot map tensor {name}")
            # Matrices used in matmuls take weight_type; tensors llama.cpp adds directly (token types) stay f32.
            matmul = array.ndim == 2 and not mapped.startswith(("token_types", "position_embd"))
            data, raw_dtype = _matrix_data(array, weight_type) if matmul else (array.astype(np.float32), None)
            writer.add_tensor(mapped, data, raw_dtype=raw_dtype)

        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with open(temp_name, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temp_name, out_path)
    finally:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
    return out_path
