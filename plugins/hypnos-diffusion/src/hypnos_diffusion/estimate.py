"""Memory needs of a diffusers folder from its safetensors headers alone (no torch): components, denoiser blocks."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import msgspec
from hypnos.engine import EngineUnavailable

# bytes per element of the safetensors dtypes
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
    "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8,
}  # fmt: skip
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
# the torch dtype names the engine may convert floating tensors to, with their element sizes
TARGET_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# the component that runs once per denoising step; its repeating blocks are the model's "layers"
DENOISERS = ("transformer", "unet", "prior", "decoder")
# top-level children of a denoiser that repeat: UNets' down/up blocks, transformers' block lists
BLOCK = re.compile(r"^((?:down_blocks|up_blocks|transformer_blocks|single_transformer_blocks|blocks|layers)\.\d+)\.")
MID = re.compile(r"^(mid_block)\.")
MAX_HEADER = 100 * 1024 * 1024


class TensorInfo(msgspec.Struct, frozen=True):
    """One tensor of a safetensors header: name, dtype, element count."""

    name: str
    dtype: str
    numel: int


class ComponentFiles(msgspec.Struct, kw_only=True):
    """One pipeline component (a subfolder of model_index.json) with its weight files and tensors."""

    name: str
    files: list[Path]
    tensors: list[TensorInfo]

    def nbytes(self, target: str | None) -> int:
        """Bytes in memory once loaded, floating tensors converted to `target` (None: as stored)."""
        return sum(tensor_bytes(t, target) for t in self.tensors)


def tensor_bytes(tensor: TensorInfo, target: str | None) -> int:
    """A tensor's bytes in memory, its floating dtype converted to `target` when given."""
    if target is not None and tensor.dtype in FLOAT_DTYPES:
        return tensor.numel * TARGET_BYTES[target]
    return tensor.numel * DTYPE_BYTES.get(tensor.dtype, 4)


def read_header(path: Path) -> list[TensorInfo]:
    """The tensors a .safetensors file declares (reads the JSON header only)."""
    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if not 2 <= length <= MAX_HEADER:
                raise ValueError(f"header length {length}")
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error) as error:
        raise EngineUnavailable(f"{path} is not a readable safetensors file ({error})") from error
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        numel = 1
        for side in entry["shape"]:
            numel *= int(side)
        out.append(TensorInfo(name, str(entry["dtype"]), numel))
    return out


def model_index(folder: Path) -> dict[str, object]:
    """The pipeline's model_index.json (what makes a folder a diffusers pipeline)."""
    path = folder / "model_index.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EngineUnavailable(f"{folder} is not a diffusers pipeline folder (model_index.json: {error})") from error
    if not isinstance(data, dict):
        raise EngineUnavailable(f"{path} is not a JSON object")
    return data


def weight_files(folder: Path, variant: str | None) -> list[Path]:
    """The .safetensors files of one component folder that diffusers loads for `variant` (None: the plain ones)."""
    files = sorted(folder.glob("*.safetensors"))
    if variant is not None:
        chosen = [f for f in files if f".{variant}." in f.name or f".{variant}-" in f.name]
        if chosen:
            return chosen
    # plain files: no variant segment (`model.safetensors`, `model-00001-of-00002.safetensors`)
    plain = [f for f in files if len(f.name.split(".")) == 2]
    return plain or files


def pipeline_components(folder: Path, variant: str | None = None) -> list[ComponentFiles]:
    """Every weighted component of the pipeline in `folder`, in model_index.json order."""
    index = model_index(folder)
    out = []
    for name, value in index.items():
        if name.startswith("_") or not isinstance(value, list) or value[0] is None:
            continue
        files = weight_files(folder / name, variant)
        if files:
            tensors = [t for f in files for t in read_header(f)]
            out.append(ComponentFiles(name=name, files=files, tensors=tensors))
    if not out:
        raise EngineUnavailable(f"{folder} holds no .safetensors weights (diffusers folders saved as safetensors)")
    return out


def denoiser_name(components: list[ComponentFiles]) -> str | None:
    """The component that runs every step (transformer or unet), when there is one."""
    names = {c.name for c in components}
    return next((n for n in DENOISERS if n in names), None)


def block_bytes(component: ComponentFiles, target: str | None) -> tuple[list[str], list[int]]:
    """The denoiser's repeating top-level blocks in execution order (names, bytes); the rest is not a block."""
    order: list[str] = []
    sizes: dict[str, int] = {}
    for tensor in component.tensors:
        match = BLOCK.match(tensor.name) or MID.match(tensor.name)
        if match is None:
            continue
        key = match.group(1)
        if key not in sizes:
            order.append(key)
            sizes[key] = 0
        sizes[key] += tensor_bytes(tensor, target)
    order.sort(key=_execution_rank)
    return order, [sizes[k] for k in order]


def _execution_rank(name: str) -> tuple[int, int]:
    kind, _, index = name.partition(".")
    rank = {"down_blocks": 0, "mid_block": 1, "up_blocks": 2, "transformer_blocks": 0, "single_transformer_blocks": 1}
    return rank.get(kind, 0), int(index or 0)


def activation_bytes(width: int, height: int, n: int, per_pixel: int, cfg: bool = True) -> int:
    """The activation workspace of one job: `per_pixel` bytes per output pixel and image, twice with guidance."""
    return width * height * max(1, n) * per_pixel * (2 if cfg else 1)
