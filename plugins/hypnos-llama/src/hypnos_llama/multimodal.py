"""Images and audio in chat prompts through llama.cpp's multimodal library (mtmd) and the model's projector file."""

from __future__ import annotations

import ctypes
import hashlib
import logging
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypnos.chat import ChatInput
from hypnos.config import LimitsConfig
from hypnos.errors import invalid_request
from hypnos.types import Modality

from hypnos_llama.media_input import AUDIO, IMAGE, MediaItem, load_request_media, media_kinds
from hypnos_llama.template import MEDIA_MARKER

logger = logging.getLogger(__name__)


def media_token(chunk_id: bytes | None) -> int:
    """The (negative, never a real token) id every cell of a media chunk holds in a job's prompt: derived from the
    media's content, so the same image at the same place gives the same ids and its cells can be reused."""
    if not chunk_id:
        return -2 - secrets.randbelow(1 << 30)  # unknown content: an id no other prompt shares
    return -(1 << 30) - int.from_bytes(hashlib.sha256(chunk_id).digest()[:4], "little") % (1 << 30)


def import_mtmd() -> Any:
    """The llama_cpp.mtmd_cpp bindings (libmtmd)."""
    from hypnos.engine import missing_library

    try:
        import llama_cpp.mtmd_cpp as mtmd
    except (ImportError, OSError) as error:
        raise missing_library("llama-cpp-python (built with libmtmd)") from error
    return mtmd


def _route_logs(mtmd: Any) -> None:
    """Send mtmd's and clip's logs through llama-cpp-python's callback (quiet unless the model is verbose)."""
    try:
        from llama_cpp import _logger

        mtmd.mtmd_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
        mtmd.mtmd_helper_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
    except (ImportError, AttributeError, ctypes.ArgumentError):  # older bindings: leave the default
        logger.debug("mtmd logs stay on stderr")


# ---- the projector ------------------------------------------------------------------------------------------------


def projector_modalities(path: Path) -> list[Modality]:
    """The modalities a projector file adds (vision, speech_to_text), read from its GGUF header."""
    from hypnos_llama.gguf_meta import read_gguf

    meta = read_gguf(path).metadata
    out = []
    if meta.get("clip.has_vision_encoder"):
        out.append(Modality.VISION)
    if meta.get("clip.has_audio_encoder"):
        out.append(Modality.SPEECH_TO_TEXT)
    return out


class Projector:
    """An mtmd context: the projector (mmproj GGUF) loaded against a llama model."""

    def __init__(self, path: Path, model_pointer: Any, *, n_threads: int, use_gpu: bool) -> None:
        self.mtmd = mtmd = import_mtmd()
        _route_logs(mtmd)
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        params.media_marker = MEDIA_MARKER.encode()
        self._marker = params.media_marker  # kept alive while the context may read it
        self.pointer = mtmd.mtmd_init_from_file(str(path).encode(), model_pointer, params)
        if not self.pointer:
            raise RuntimeError(f"llama.cpp could not load the projector {path}")
        self.vision = bool(mtmd.mtmd_support_vision(self.pointer))
        self.audio = bool(mtmd.mtmd_support_audio(self.pointer))
        self.sample_rate = int(mtmd.mtmd_get_audio_sample_rate(self.pointer)) if self.audio else 16000
        self._lock = threading.Lock()  # tokenizing (image preprocessing) from request threads, one at a time

    def close(self) -> None:
        """Free the mtmd context (idempotent; before the llama model it was built on)."""
        if self.pointer:
            self.mtmd.mtmd_free(self.pointer)
            self.pointer = None

    def kinds(self) -> set[str]:
        """The media kinds this projector takes."""
        return {k for k, ok in ((IMAGE, self.vision), (AUDIO, self.audio)) if ok}

    def check_kinds(self, kinds: Sequence[str], model_id: str) -> None:
        """400 invalid_request_error when the request holds a media kind the projector does not take."""
        for kind in dict.fromkeys(kinds):
            if kind not in self.kinds():
                raise invalid_request(
                    f"the model `{model_id}` does not take {kind} input (its projector has no "
                    f"{'vision' if kind == IMAGE else 'audio'} encoder)"
                )

    def tokenize(self, text: str, items: Sequence[MediaItem]) -> MediaPrompt:
        """The prompt as mtmd chunks, each media item where its marker sits in the text."""
        mtmd = self.mtmd
        bitmaps = []
        chunks = None
        try:
            for item in items:
                if item.kind == IMAGE:
                    pixels = (ctypes.c_uint8 * len(item.data)).from_buffer_copy(item.data)
                    bitmap = mtmd.mtmd_bitmap_init(item.width, item.height, pixels)
                else:
                    samples = (ctypes.c_float * item.samples).from_buffer_copy(item.data)
                    bitmap = mtmd.mtmd_bitmap_init_from_audio(item.samples, samples)
                if not bitmap:
                    raise invalid_request(f"the {item.kind} could not be prepared for the model")
                bitmaps.append(bitmap)
                digest = hashlib.sha256(f"{item.kind}:{item.width}x{item.height}:".encode() + item.data)
                mtmd.mtmd_bitmap_set_id(bitmap, digest.hexdigest().encode())
            encoded = text.encode("utf-8")
            source = mtmd.mtmd_input_text(encoded, len(encoded), True, True)
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            chunks = mtmd.mtmd_input_chunks_init()
            with self._lock:
                status = mtmd.mtmd_tokenize(self.pointer, chunks, ctypes.byref(source), array, len(bitmaps))
            if status == 1:
                raise invalid_request("the prompt's media markers do not match its media parts")
            if status != 0:
                raise invalid_request(f"the media could not be prepared for the model (mtmd status {status})")
            prompt = MediaPrompt(self, chunks)
            chunks = None
            return prompt
        finally:
            if chunks is not None:
                mtmd.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)


@dataclass
class MediaPrompt:
    """A tokenized multimodal prompt: mtmd chunks (freed by close) and its tokens with media as placeholders."""

    projector: Projector
    chunks: Any
    tokens: list[int] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)  # the final text chunk, prefilled by the batch loop
    text: str = ""  # the rendered prompt, markers included

    def __post_init__(self) -> None:
        mtmd = self.projector.mtmd
        count = mtmd.mtmd_input_chunks_size(self.chunks)
        for index in range(count):
            chunk = mtmd.mtmd_input_chunks_get(self.chunks, index)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                pointer = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                text = [int(pointer[i]) for i in range(n.value)]
                self.tokens.extend(text)
                self.tail = text if index == count - 1 else []
            else:
                media = media_token(mtmd.mtmd_input_chunk_get_id(chunk))
                self.tokens.extend([media] * mtmd.mtmd_input_chunk_get_n_tokens(chunk))
        self._head_chunks = count - 1 if self.tail else count

    def close(self) -> None:
        """Free the chunks (idempotent)."""
        if self.chunks is not None:
            self.projector.mtmd.mtmd_input_chunks_free(self.chunks)
            self.chunks = None

    def __del__(self) -> None:
        self.close()

    @property
    def head_tokens(self) -> int:
        """Cells the chunks before the final text fill (evaluated by mtmd)."""
        return len(self.tokens) - len(self.tail)

    def eval_head(self, context_pointer: Any, seq_id: int, n_batch: int) -> int:
        """Evaluate every chunk but the final text into a sequence from position 0; returns the next position."""
        mtmd = self.projector.mtmd
        if self.projector.pointer is None or self.chunks is None:
            raise RuntimeError("the projector was unloaded")
        n_past = 0
        new_n_past = ctypes.c_int32(0)
        for index in range(self._head_chunks):
            chunk = mtmd.mtmd_input_chunks_get(self.chunks, index)
            status = mtmd.mtmd_helper_eval_chunk_single(
                self.projector.pointer, context_pointer, chunk, n_past, seq_id, n_batch, False, ctypes.byref(new_n_past)
            )
            if status != 0:
                raise RuntimeError(f"evaluating the prompt's media failed (mtmd status {status})")
            n_past = int(new_n_past.value)
        return n_past


# ---- what the engine calls ------------------------------------------------------------------------------------------


def projector_modalities_of(path: Path | None) -> list[Modality]:
    """The modalities a model's projector file adds (none without one, or when its header cannot be read: the load
    then fails with a clear message instead)."""
    if path is None or not path.is_file():
        return []
    try:
        return projector_modalities(path)
    except Exception as error:
        logger.warning("could not read the projector header %s: %s", path, error)
        return []


def load_projector(
    path: Path | None, model: Any, options: Any, model_id: str, *, use_gpu: bool
) -> tuple[Projector | None, float | None]:
    """The projector loaded against a llama model (on the loading thread), and the milliseconds it took."""
    import time

    from hypnos.engine import EngineUnavailable

    if path is None:
        return None, None
    if not path.is_file():
        raise EngineUnavailable(f"the projector (aux_path) of `{model_id}` is missing: {path}")
    started = time.perf_counter()
    projector = Projector(path, model.pointer, n_threads=options.batch_threads(), use_gpu=use_gpu)
    return projector, (time.perf_counter() - started) * 1000


async def media_prompt(
    projector: Projector | None, render: Callable[[], str], request: ChatInput, limits: LimitsConfig, model_id: str
) -> MediaPrompt:
    """Check, decode and tokenize a request with media parts into an mtmd prompt."""
    import asyncio

    kinds = media_kinds(request)
    if projector is None:
        raise invalid_request(
            f"the model `{model_id}` does not take {kinds[0]} input (it has no projector file, aux_path)"
        )
    projector.check_kinds(kinds, model_id)
    items = await load_request_media(request, limits, sample_rate=projector.sample_rate)
    text = await asyncio.to_thread(render)
    prompt = await asyncio.to_thread(projector.tokenize, text, items)
    prompt.text = text
    if not prompt.tail:
        prompt.close()
        raise invalid_request("the chat template ended the prompt with a media part; it must end with text")
    return prompt
