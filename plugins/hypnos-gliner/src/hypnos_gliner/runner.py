"""A built GLiNER model (torch or ONNX Runtime) that runs batches of passes and returns every span above threshold.

Only this module and `testing` import gliner; the version is pinned (gliner==0.2.29), which this module relies on
for the loader steps `GLiNER.from_pretrained` takes (so that torch builds from the state dict held in RAM).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from hypnos_gliner.weights import ModelFiles

logger = logging.getLogger(__name__)

# Tokenizers without a real limit report a huge model_max_length; above this we treat the length as unbounded.
_UNBOUNDED = 100_000
# Label families whose prompt length is remembered (requests usually repeat theirs); the cache starts over when full.
_PROMPT_CACHE = 1024


@dataclass(frozen=True)
class Pass:
    """One model pass: a window's words, one family of labels, the request's threshold."""

    words: list[str]
    labels: list[str]
    threshold: float


@dataclass(frozen=True)
class WordSpan:
    """A span found in one pass: word indices [first, last] inside its window, label, score."""

    first: int
    last: int
    label: str
    score: float


def _keep_every_span(spans: list[Any], flat_ner: bool = True, multi_label: bool = False) -> list[Any]:
    """Stands in for the decoder's greedy search: the engine resolves overlaps once, over all passes."""
    return spans


def _bi_encoder(model: Any) -> bool:
    """True for models whose labels have an encoder of their own."""
    from gliner.data_processing import BaseBiEncoderProcessor

    return isinstance(model.data_processor, BaseBiEncoderProcessor)


def read_state_dict(files: ModelFiles) -> dict[str, Any]:
    """The torch weights as CPU tensors (tier 2: host RAM), read the way GLiNER reads them."""
    from gliner.model import BaseGLiNER

    return BaseGLiNER._load_state_dict(files.weights, "cpu")


def _torch_model(files: ModelFiles, state_dict: dict[str, Any], device: str) -> Any:
    """GLiNER.from_pretrained's steps, with the weights taken from RAM instead of the file."""
    from gliner import GLiNER
    from transformers import AutoTokenizer

    config = GLiNER._config_from_dict(json.loads(files.config.read_text(encoding="utf-8")))
    variant = GLiNER._get_gliner_class(config)
    config = variant._load_config(files.config)
    tokenizer = variant._load_tokenizer(config, files.folder, local_files_only=True)
    extra: dict[str, Any] = {}
    for name in ("labels_tokenizer", "decoder_tokenizer"):
        if (files.folder / name / "tokenizer_config.json").is_file():
            extra[name] = AutoTokenizer.from_pretrained(files.folder / name, local_files_only=True)
    model = variant(config, tokenizer=tokenizer, backbone_from_pretrained=False, local_files_only=True, **extra)
    variant._resize_token_embeddings(model, config, tokenizer, True)
    # on the CPU the model takes the RAM copy's tensors as they are (no second copy); elsewhere it copies them over
    model.model.load_state_dict(state_dict, strict=False, assign=device == "cpu")
    model.model.to(device)
    model.eval()
    return model


def _onnx_model(files: ModelFiles, onnx_bytes: bytes, device: str, threads: int, spin: bool) -> Any:
    import onnxruntime as ort
    from gliner import GLiNER

    options = ort.SessionOptions()
    # the engine's sessions sleep between runs instead of spinning: they share the cores with the server's threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if threads > 0:
        options.intra_op_num_threads = threads
    providers = ["CPUExecutionProvider"]
    if device == "cuda":
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    session = ort.InferenceSession(onnx_bytes, options, providers=providers)
    return GLiNER.from_pretrained(
        str(files.folder), local_files_only=True, runtime="onnxruntime", runtime_options={"session": session}
    )


class GlinerRunner:
    """One built model: words and subword counts of texts, and batched passes returning raw span candidates."""

    def __init__(self, model: Any, device: str) -> None:
        self.model = model
        self.device = device
        self.model.decoder.greedy_search = _keep_every_span  # this instance only: overlaps are resolved by spans.py
        self.collator = model.create_collator()
        self.tokenizer = model.data_processor.transformer_tokenizer
        self.max_words = int(model.config.max_len)
        self.max_width = int(model.config.max_width)
        limit = int(getattr(self.tokenizer, "model_max_length", 0) or 0)
        self.max_length = limit if 0 < limit < _UNBOUNDED else None
        self.shared_labels_only = model.is_runtime_model and _bi_encoder(model)
        self._prompt_cache: dict[tuple[str, ...], int] = {}

    @classmethod
    def from_torch(cls, files: ModelFiles, state_dict: dict[str, Any], device: str, threads: int) -> GlinerRunner:
        """Build the torch model on `device` from the state dict in RAM."""
        import torch

        if threads > 0:
            torch.set_num_threads(threads)
        return cls(_torch_model(files, state_dict, device), device)

    @classmethod
    def from_onnx(
        cls, files: ModelFiles, onnx_bytes: bytes, device: str, threads: int, spin: bool = False
    ) -> GlinerRunner:
        """Build an ONNX Runtime session from the export's bytes in RAM (CUDA provider when device is cuda) with
        `threads` intra-op threads (0: ONNX Runtime's default) that spin between runs only when `spin`."""
        model = _onnx_model(files, onnx_bytes, device, threads, spin)
        providers = model.model.session.get_providers() if hasattr(model.model, "session") else []
        return cls(model, "cuda" if "CUDAExecutionProvider" in providers else "cpu")

    def words(self, text: str) -> list[tuple[str, int, int]]:
        """The model's words of a text: (word, start, end) in character offsets."""
        return [(word, start, end) for word, start, end in self.model.data_processor.words_splitter(text)]

    def subword_counts(self, words: list[str]) -> list[int]:
        """How many subword tokens each word takes (at least one), tokenized as the collator does: pre-split words
        in one call (not one sequence per word, which costs twice as much)."""
        if not words:
            return []
        counts = [0] * len(words)
        for word in self.tokenizer(words, is_split_into_words=True, add_special_tokens=False).word_ids():
            if word is not None:
                counts[word] += 1
        return [max(1, count) for count in counts]

    def text_token_budget(self, families: list[list[str]]) -> int | None:
        """Subword tokens left for the text once the longest family's label prompt and the specials are in."""
        if self.max_length is None:
            return None
        prompt = max(self._prompt_tokens(tuple(family)) for family in families)
        return max(16, self.max_length - prompt - 2)

    def _prompt_tokens(self, family: tuple[str, ...]) -> int:
        """Subword tokens of a family's label prompt (a marker before each label, a separator after), remembered."""
        tokens = self._prompt_cache.get(family)
        if tokens is None:
            if len(self._prompt_cache) >= _PROMPT_CACHE:
                self._prompt_cache.clear()
            tokens = sum(1 + count for count in self.subword_counts(list(family))) + 1
            self._prompt_cache[family] = tokens
        return tokens

    def run(self, passes: list[Pass]) -> list[list[WordSpan]]:
        """Every span above each pass's threshold, in the decoder's order: the passes as one batch, or, where the
        model takes one label set per batch (bi-encoder ONNX graphs), one batch per label set."""
        if not self.shared_labels_only:
            return self._run(passes, [p.labels for p in passes])
        groups: dict[tuple[str, ...], list[int]] = {}
        for index, item in enumerate(passes):
            groups.setdefault(tuple(item.labels), []).append(index)
        results: list[list[WordSpan]] = [[] for _ in passes]
        for labels, indexes in groups.items():
            for index, found in zip(indexes, self._run([passes[i] for i in indexes], list(labels)), strict=True):
                results[index] = found
        return results

    def _run(self, passes: list[Pass], labels: list[Any]) -> list[list[WordSpan]]:
        input_x = [{"tokenized_text": p.words, "ner": None} for p in passes]
        batch = self.model.collate_batch(input_x, labels, self.collator)
        output = self.model.run_batch(batch, threshold=min(p.threshold for p in passes))
        thresholds = [p.threshold for p in passes]
        decoded = self.model.decode_batch(output, batch, threshold=thresholds, flat_ner=False, multi_label=False)
        return [[WordSpan(s.start, s.end, s.entity_type, float(s.score)) for s in spans] for spans in decoded]
