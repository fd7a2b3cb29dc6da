"""A GLiNER folder's files: which runtime serves it, and the weight bytes read from the files' headers."""

from __future__ import annotations

import json
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hypnos.engine import EngineUnavailable

CONFIG_FILE = "gliner_config.json"
ONNX_FILE = "model.onnx"
TORCH_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class ModelFiles:
    """The files of one GLiNER folder the engine reads."""

    folder: Path
    runtime: str  # "onnx" or "torch"
    weights: Path

    @property
    def config(self) -> Path:
        """gliner_config.json."""
        return self.folder / CONFIG_FILE


def find_files(folder: Path, runtime: str, model_id: str) -> ModelFiles:
    """The weights to serve: the ONNX export where the folder has one (runtime auto/onnx), else the torch weights."""
    if not (folder / CONFIG_FILE).is_file():
        raise EngineUnavailable(f"the model `{model_id}`: {folder} holds no {CONFIG_FILE} (a GLiNER model folder)")
    onnx = folder / ONNX_FILE
    torch_file = next((folder / name for name in TORCH_FILES if (folder / name).is_file()), None)
    if runtime in ("auto", "onnx") and onnx.is_file():
        return ModelFiles(folder, "onnx", onnx)
    if runtime == "onnx":
        raise EngineUnavailable(f"the model `{model_id}` asks for runtime onnx but {onnx} does not exist")
    if torch_file is None:
        raise EngineUnavailable(f"the model `{model_id}`: {folder} holds none of {', '.join(TORCH_FILES)}")
    return ModelFiles(folder, "torch", torch_file)


def safetensors_bytes(path: Path) -> int:
    """The tensor bytes a safetensors file declares in its header."""
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    return sum(
        end - start for key, entry in header.items() if key != "__metadata__" for start, end in [entry["data_offsets"]]
    )


def torch_zip_bytes(path: Path) -> int:
    """The tensor storage bytes a torch zip checkpoint lists in its directory (its `data/` entries)."""
    with zipfile.ZipFile(path) as archive:
        return sum(info.file_size for info in archive.infolist() if "/data/" in info.filename)


def weight_bytes(files: ModelFiles) -> int:
    """The weights' bytes from the files' headers (an ONNX file, and its external data, by size)."""
    path = files.weights
    try:
        if path.suffix == ".safetensors":
            return safetensors_bytes(path)
        if path.suffix == ".bin" and zipfile.is_zipfile(path):
            return torch_zip_bytes(path)
        extra = sum(p.stat().st_size for p in path.parent.glob(f"{path.name}_data*")) if path.suffix == ".onnx" else 0
        return path.stat().st_size + extra
    except (OSError, ValueError, KeyError, struct.error) as error:
        raise EngineUnavailable(f"cannot read the weights' header of {path}: {error}") from error


def workspace_bytes(files: ModelFiles, batch: int) -> int:
    """Inference working memory for a batch of full windows, from gliner_config.json: span representations
    (max_len x max_width x hidden), attention scores (heads x tokens^2) and the encoder's activations."""
    try:
        config = json.loads(files.config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EngineUnavailable(f"cannot read {files.config}: {error}") from error
    encoder = config.get("encoder_config") or {}
    hidden = int(config.get("hidden_size") or 512)
    encoder_hidden = int(encoder.get("hidden_size") or 768)
    heads = int(encoder.get("num_attention_heads") or 12)
    words, width = int(config.get("max_len") or 384), int(config.get("max_width") or 12)
    tokens = words * 3 // 2 + 64  # subword tokens of a full window plus a family's label prompt
    spans = words * width * hidden * 4 * 4
    attention = heads * tokens * tokens * 4 * 2
    activations = tokens * encoder_hidden * 4 * 8
    return max(1, batch) * (spans + attention + activations)
