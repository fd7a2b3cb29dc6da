"""Thin owners of llama.cpp's model and context handles (low-level API), imported only by the engine's worker."""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypnos.engine import missing_library

from hypnos_llama.options import GGML_TYPE_IDS, LlamaOptions

logger = logging.getLogger(__name__)


def import_llama_cpp() -> Any:
    """The llama_cpp module, or the engine's 503 naming the package when it is not installed."""
    try:
        import llama_cpp
    except ImportError as error:
        raise missing_library("llama-cpp-python") from error
    return llama_cpp


def same_answer_batched_or_not(options: LlamaOptions) -> None:
    """Keep llama.cpp's tiled K-quant matmul off unless `repack` allows it (it is the process's choice, read once).

    With AVX-512 the tiled kernels give a row slightly different sums depending on where it falls in a tile, so a
    prompt prefilled beside other sequences could continue differently than alone. GGML_CPU_TILED_MM is read at
    the process's first matmul: the first model loaded decides, unless the environment already sets it.
    """
    os.environ.setdefault("GGML_CPU_TILED_MM", "1" if options.repack else "0")


class LlamaModel:
    """A loaded llama.cpp model and its vocabulary: tokenize, pieces, EOG and control tokens, metadata."""

    def __init__(self, path: Path, options: LlamaOptions, n_gpu_layers: int, *, cpu_experts: str | None = None) -> None:
        self.lib = lib = import_llama_cpp()
        logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if options.verbose else logging.ERROR)
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        if hasattr(params, "load_mode"):
            params.load_mode = lib.LLAMA_LOAD_MODE_MMAP if options.use_mmap else lib.LLAMA_LOAD_MODE_NONE
        else:  # older bindings
            params.use_mmap = options.use_mmap
        params.use_extra_bufts = options.repack
        same_answer_batched_or_not(options)
        self.expert_overrides = None
        if cpu_experts:  # MoE expert offload: these expert tensors stay in host memory
            from hypnos_llama.moe_offload import CpuExpertOverrides

            self.expert_overrides = CpuExpertOverrides(cpu_experts, lib)
            params.tensor_buft_overrides = self.expert_overrides.pointer
        self.pointer = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.pointer:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.vocab = lib.llama_model_get_vocab(self.pointer)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = lib.llama_model_n_ctx_train(self.pointer)
        self.vocab_type = int(lib.llama_vocab_type(self.vocab)) if hasattr(lib, "llama_vocab_type") else 0
        self._piece_buffer = ctypes.create_string_buffer(256)
        self._eog: dict[int, bool] = {}
        self._control: dict[int, bool] = {}

    def close(self) -> None:
        """Free the model (idempotent)."""
        if self.pointer:
            self.lib.llama_model_free(self.pointer)
            self.pointer = None

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text to token ids; special markers in the rendered template are parsed as tokens."""
        data = text.encode("utf-8")
        capacity = len(data) + 16
        tokens = (self.lib.llama_token * capacity)()
        count = self.lib.llama_tokenize(self.vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if count < 0:
            capacity = -count
            tokens = (self.lib.llama_token * capacity)()
            count = self.lib.llama_tokenize(self.vocab, data, len(data), tokens, capacity, add_special, parse_special)
        return list(tokens[:count])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for; control tokens render as nothing."""
        control = self._control.get(token)
        if control is None:
            control = self._control[token] = bool(self.lib.llama_vocab_is_control(self.vocab, token))
        if control:
            return b""
        buffer = self._piece_buffer
        size = self.lib.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, False)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = self.lib.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, False)
        return buffer.raw[:size]

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (eos, eot, im_end ...)."""
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(self.lib.llama_vocab_is_eog(self.vocab, token))
        return eog

    def token_text(self, token: int) -> str:
        """A special token's text (bos/eos for the chat template), '' when the id is invalid."""
        if token < 0 or token >= self.n_vocab:
            return ""
        return self.lib.llama_vocab_get_text(self.vocab, token).decode("utf-8", "replace")

    def bos_eos(self) -> tuple[str, str]:
        """The bos and eos token texts."""
        lib = self.lib
        return self.token_text(lib.llama_vocab_bos(self.vocab)), self.token_text(lib.llama_vocab_eos(self.vocab))


def strlen_callback(lib: Any) -> Any:
    """libc's strlen as a ggml_abort_callback: true while the flag buffer it gets holds a non-empty string (None
    where the process's symbols hold no strlen, e.g. Windows)."""
    try:
        address = ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value
    except (OSError, TypeError, AttributeError):
        return None
    return lib.ggml_abort_callback(address)


@dataclass
class ContextShape:
    """What a context was built for: total cells, sequences, batch sizes."""

    n_ctx: int
    n_seq: int
    n_batch: int
    n_ubatch: int


def context_shape(n_ctx: int, n_seq: int, n_batch: int, n_ubatch: int) -> ContextShape:
    """A ContextShape with llama.cpp-friendly rounding (cells in multiples of 256)."""
    cells = -(-max(n_ctx, 256) // 256) * 256
    return ContextShape(n_ctx=cells, n_seq=max(1, n_seq), n_batch=max(1, n_batch), n_ubatch=max(1, n_ubatch))


class LlamaContext:
    """A llama.cpp context (KV cache for n_seq sequences) with one reusable batch."""

    def __init__(self, model: LlamaModel, options: LlamaOptions, shape: ContextShape) -> None:
        lib = self.lib = model.lib
        self.model = model
        params = lib.llama_context_default_params()
        params.n_ctx = shape.n_ctx
        params.n_batch = shape.n_batch
        params.n_ubatch = min(shape.n_ubatch, shape.n_batch)
        params.n_seq_max = shape.n_seq
        params.n_threads = options.threads()
        params.n_threads_batch = options.batch_threads()
        params.kv_unified = options.kv_unified
        params.no_perf = True
        params.type_k = GGML_TYPE_IDS.get(options.type_k, 1)
        params.type_v = GGML_TYPE_IDS.get(options.type_v, 1)
        if options.flash_attn is not None:
            params.flash_attn_type = (
                lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if options.flash_attn else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        self.pointer = lib.llama_init_from_model(model.pointer, params)
        if not self.pointer:
            raise RuntimeError("llama.cpp could not create a context")
        self.unified = bool(options.kv_unified)
        # one cell may serve several sequences (a prefix borrowed, slot_cache.borrow_prefix): not where a recurrent
        # state (Mamba, hybrids) stands for the whole sequence
        recurrent = lib.llama_model_is_recurrent(model.pointer) or lib.llama_model_is_hybrid(model.pointer)
        self.shares_cells = self.unified and not recurrent
        self.shape = ContextShape(lib.llama_n_ctx(self.pointer), shape.n_seq, shape.n_batch, params.n_ubatch)
        self.memory = lib.llama_get_memory(self.pointer)
        self.batch = lib.llama_batch_init(shape.n_batch, 0, 1)
        self.n_tokens = 0
        self.threads = (params.n_threads, params.n_threads_batch)
        self._abort: Any = None  # the abort callback and its flag, while llama.cpp holds their addresses

    def set_threads(self, threads: int, batch_threads: int) -> None:
        """The threads of the next decodes: generation and prompt processing (llama_set_n_threads)."""
        if (threads, batch_threads) != self.threads:
            self.lib.llama_set_n_threads(self.pointer, threads, batch_threads)
            self.threads = (threads, batch_threads)

    def close(self) -> None:
        """Free the batch and the context (idempotent)."""
        if self.pointer:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.pointer)
            self.pointer = None

    def seq_trim(self, seq_id: int, keep: int) -> bool:
        """Drop a sequence's cells from position `keep` on (keep=0 clears it)."""
        return bool(self.lib.llama_memory_seq_rm(self.memory, seq_id, keep, -1))

    def seq_share(self, source: int, target: int, start: int, end: int) -> None:
        """Let sequence `target` use `source`'s cells at positions start..end-1 (in a unified pool a cell serves every
        sequence it names: nothing is computed or copied)."""
        self.lib.llama_memory_seq_cp(self.memory, source, target, start, end)

    def seq_state(self, seq_id: int, head: bytes = b"") -> bytearray:
        """`head`, then llama.cpp's serialized state of one sequence (its KV cells), for the prompt cache: llama.cpp
        writes the state straight into the one buffer returned (a long prompt's state is hundreds of MB, and every
        copy of it is host memory under the engine host's limit). Only `head` when the sequence holds nothing."""
        size = self.lib.llama_state_seq_get_size(self.pointer, seq_id)
        blob = bytearray(len(head) + size)
        blob[: len(head)] = head
        target = (ctypes.c_uint8 * size).from_buffer(blob, len(head))
        written = self.lib.llama_state_seq_get_data(self.pointer, target, size, seq_id)
        del target  # the buffer's export ends: it may shrink
        del blob[len(head) + written :]
        return blob

    def set_seq_state(self, seq_id: int, state: bytes | bytearray, skip: int = 0) -> bool:
        """Load a sequence's state saved by seq_state (after `skip` bytes of `state`) into `seq_id`, read in place
        (no copy of it is made); False when llama.cpp refuses it."""
        size = len(state) - skip
        if size <= 0:
            return False
        if isinstance(state, bytearray):
            source: Any = (ctypes.c_uint8 * size).from_buffer(state, skip)
        else:
            start = ctypes.cast(ctypes.c_char_p(state), ctypes.c_void_p).value or 0
            source = ctypes.cast(start + skip, ctypes.POINTER(ctypes.c_uint8))
        return self.lib.llama_state_seq_set_data(self.pointer, source, size, seq_id) > 0

    def seq_pos_max(self, seq_id: int) -> int:
        """The last position a sequence holds in the memory (-1: none)."""
        return int(self.lib.llama_memory_seq_pos_max(self.memory, seq_id))

    def abort_when(self, flag: ctypes.Array[ctypes.c_char]) -> None:
        """Make llama_decode stop (status 2) while `flag` holds a non-empty string (step_abort.AbortSwitch)."""
        self._abort = strlen_callback(self.lib), flag  # kept alive as long as the context
        if self._abort[0] is None:
            logger.info("no libc strlen to abort llama_decode with: batch lines' steps run to their end")
            return
        self.lib.llama_set_abort_callback(self.pointer, self._abort[0], ctypes.addressof(flag))

    def clear(self) -> None:
        """Drop every sequence's cells."""
        self.lib.llama_memory_clear(self.memory, True)

    def batch_clear(self) -> None:
        """Start a new batch."""
        self.n_tokens = 0

    def batch_add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token of a sequence; returns its index in the batch (for sampling)."""
        index = self.n_tokens
        batch = self.batch
        batch.token[index] = token
        batch.pos[index] = pos
        batch.n_seq_id[index] = 1
        batch.seq_id[index][0] = seq_id
        batch.logits[index] = logits
        self.n_tokens = index + 1
        return index

    def decode(self) -> int:
        """Run llama_decode over the batch; returns llama.cpp's status (0 ok, 1 no KV room)."""
        self.batch.n_tokens = self.n_tokens
        return int(self.lib.llama_decode(self.pointer, self.batch))
