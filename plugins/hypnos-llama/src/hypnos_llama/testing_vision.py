"""Test kit for vision: a tiny random-weight Qwen2-VL converted by llama.cpp's own script to a GGUF and an mmproj.

The conversion needs torch and transformers (extra `vision-test`) and llama.cpp's `convert_hf_to_gguf.py`, which
ships in the llama-cpp-python sdist: it is taken from `HYPNOS_LLAMA_CPP_CONVERT_DIR` when set, else from a cache
folder, else extracted once from `pip download --no-binary :all: llama-cpp-python==<installed version>`.
Everything heavy runs in subprocesses, so importing this module costs nothing.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CONVERTER_FILES = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
BUILD_VERSION = "1"  # bump when the tiny model's recipe changes (the cache key)


@dataclass(frozen=True)
class TinyVisionModel:
    """The converted files: the text model GGUF and its projector (mmproj) GGUF."""

    weights: Path
    projector: Path


def cache_root() -> Path:
    """Where built files are kept between sessions (HYPNOS_TEST_CACHE_DIR or the temp folder)."""
    base = os.environ.get("HYPNOS_TEST_CACHE_DIR") or Path(tempfile.gettempdir()) / "hypnos-test-cache"
    return Path(base)


def converter_dir(cache: Path | None = None) -> Path:
    """A folder holding convert_hf_to_gguf.py, conversion/ and gguf-py/ of the installed llama-cpp-python."""
    configured = os.environ.get("HYPNOS_LLAMA_CPP_CONVERT_DIR")
    if configured:
        return Path(configured)
    version = importlib.metadata.version("llama-cpp-python")
    target = (cache or cache_root()) / f"llama-cpp-convert-{version}"
    if (target / "convert_hf_to_gguf.py").is_file():
        return target
    with tempfile.TemporaryDirectory() as download:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-q",
            f"llama-cpp-python=={version}",
            "-d",
            download,
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=600)
        archive = next(Path(download).glob("llama_cpp_python-*.tar.gz"))
        staging = Path(tempfile.mkdtemp(prefix="convert-", dir=target.parent if target.parent.exists() else None))
        _extract_converter(archive, staging)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(target)  # write-once: a concurrent builder that won keeps its copy
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _extract_converter(archive: Path, destination: Path) -> None:
    """Copy the converter's files out of the sdist's vendor/llama.cpp folder."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/", 3)
            if len(parts) < 4 or parts[1:3] != ["vendor", "llama.cpp"] or not member.isfile():
                continue
            relative = parts[3]
            if not any(relative == f or (f.endswith("/") and relative.startswith(f)) for f in CONVERTER_FILES):
                continue
            out = destination / relative
            out.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            out.write_bytes(source.read())


# The HF checkpoint is written by a subprocess so torch and transformers never load into the test process.
_WRITE_HF = r"""
import json
import sys
from pathlib import Path
from typing import Any
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import (PreTrainedTokenizerFast, Qwen2AudioConfig, Qwen2AudioForConditionalGeneration,
                          Qwen2VLConfig, Qwen2VLForConditionalGeneration)

out = Path(sys.argv[1])
special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=special,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
corpus = ["What is in this picture? A red square on a white background. The capital of France is Paris."] * 20
tok.train_from_iterator(corpus, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
fast.chat_template = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
fast.save_pretrained(out)
vocab = tok.get_vocab_size()
ids = {name: tok.token_to_id(name) for name in special}
text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
if sys.argv[2] == "qwen2vl":
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    config = Qwen2VLConfig(
        text_config=text,
        vision_config=dict(depth=3, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2, in_channels=3,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    model_class = Qwen2VLForConditionalGeneration
else:  # qwen2audio: a whisper-style encoder (128 mel bins; >= 3 layers, its conv names count as blocks)
    config = Qwen2AudioConfig(
        text_config={"model_type": "qwen2", **text},
        audio_config=dict(num_mel_bins=128, encoder_layers=3, encoder_attention_heads=2, encoder_ffn_dim=64,
                          d_model=32, max_source_positions=1500),
        audio_token_index=ids["<|AUDIO|>"],
    )
    model_class = Qwen2AudioForConditionalGeneration
torch.manual_seed(0)
model = model_class(config).eval()
model.save_pretrained(out)
(out / "preprocessor_config.json").write_text(json.dumps({"feature_size": 128, "sampling_rate": 16000,
    "image_processor_type": "Qwen2VLImageProcessor", "do_resize": True, "do_normalize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "merge_size": 2, "temporal_patch_size": 2}))
"""

# Runs llama.cpp's converter with the tiny tokenizer's pre-tokenizer named (its hash is in no upstream table).
_CONVERT = r"""
import sys
sys.path.insert(0, sys.argv[1])
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"


def _no_sentencepiece(self, *args, **kwargs):  # the tiny tokenizer is byte-level BPE (tokenizer.json only)
    raise FileNotFoundError("no tokenizer.model")


base.TextModel._set_vocab_sentencepiece = _no_sentencepiece
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[2:]]
convert_hf_to_gguf.main()
"""


def _run(code: str, *args: str, cwd: Path | None = None) -> None:
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=900, env=environment, cwd=cwd
    )
    if result.returncode != 0:
        raise RuntimeError(f"building the tiny vision model failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")


def build_tiny_qwen2vl(cache: Path | None = None) -> TinyVisionModel:
    """The tiny Qwen2-VL GGUF + mmproj (vision), built once (write-once folder keyed by recipe and version)."""
    return _build("qwen2vl", cache)


def build_tiny_qwen2audio(cache: Path | None = None) -> TinyVisionModel:
    """The tiny Qwen2-Audio GGUF + mmproj (audio input), built the same way."""
    return _build("qwen2audio", cache)


def _build(kind: str, cache: Path | None) -> TinyVisionModel:
    root = cache or cache_root()
    version = importlib.metadata.version("llama-cpp-python")
    key = hashlib.sha256(f"{BUILD_VERSION}/{version}/{_WRITE_HF}/{_CONVERT}".encode()).hexdigest()[:12]
    target = root / f"tiny-{kind}-{key}"
    built = TinyVisionModel(weights=target / f"tiny-{kind}.gguf", projector=target / f"mmproj-tiny-{kind}.gguf")
    if built.weights.is_file() and built.projector.is_file():
        return built
    convert = converter_dir(root)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"tiny-{kind}-", dir=root))
    try:
        hf = staging / "hf"
        _run(_WRITE_HF, str(hf), kind)
        _run(_CONVERT, str(convert), str(hf), "--outtype", "f32", "--outfile", str(staging / built.weights.name))
        _run(
            _CONVERT,
            str(convert),
            str(hf),
            "--outtype",
            "f32",
            "--mmproj",
            "--outfile",
            str(staging / built.projector.name),
        )
        shutil.rmtree(hf)
        try:
            staging.rename(target)
        except OSError:  # another session finished first: keep its files
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return built


def png_bytes(
    size: tuple[int, int] = (56, 56), color: tuple[int, int, int] = (200, 30, 30), image_format: str = "PNG"
) -> bytes:
    """A solid-colour image encoded as PNG (or JPEG, WEBP ...), for requests."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format=image_format)
    return buffer.getvalue()


def make_vision_engine(
    model: TinyVisionModel, *, slots: int = 2, context_len: int = 4096, model_id: str = "tiny-vl", limits: Any = None
) -> Any:
    """A LlamaEngine (not loaded) for the tiny vision model with its projector as aux_path."""
    from hypnos.config import LimitsConfig, ModelConfig
    from hypnos.engine import EngineContext
    from hypnos.types import Modality

    from hypnos_llama.engine import LlamaEngine

    config = ModelConfig(
        id=model_id,
        modality=Modality.TEXT_GENERATION,
        engine="ggml_llama",
        weights_path=str(model.weights),
        aux_path=str(model.projector),
        slots=slots,
        context_len=context_len,
        engine_options={"llama": {"n_threads": 1}},
    )
    return LlamaEngine(config, EngineContext(models_dir=model.weights.parent, limits=limits or LimitsConfig()))


def image_part(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    """An image_url content part (wire shape) holding the bytes as a data: URL."""
    import base64

    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


def input_part(part: dict[str, Any] | str) -> Any:
    """A wire content part (text, image_url data: URL, input_audio) as the server hands it to engines."""
    from hypnos.chat import AudioPart, ImagePart, TextPart
    from hypnos.media import decode_base64, decode_data_url

    if isinstance(part, str):
        return TextPart(text=part)
    if part["type"] == "image_url":
        media = decode_data_url(part["image_url"]["url"], max_bytes=1 << 30)
        return ImagePart(data=media.data, mime=media.mime)
    if part["type"] == "input_audio":
        audio = part["input_audio"]
        return AudioPart(data=decode_base64(audio["data"], max_bytes=1 << 30), format=audio.get("format", "wav"))
    return TextPart(text=part.get("text") or "")


def vision_request(*parts: dict[str, Any] | str, model: str = "tiny-vl", **fields: Any) -> Any:
    """A one-message user chat input whose content is the given parts (strings become text parts)."""
    from hypnos.chat import InputMessage

    from hypnos_llama.testing import chat_input

    return chat_input([InputMessage(role="user", parts=[input_part(p) for p in parts])], **fields)
