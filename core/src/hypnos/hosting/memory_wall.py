"""The last wall around an engine host: a memory limit per host, so a bomb that slips past the input bounds costs one
request's host, never the machine.

Two layers, one limit ([models.process] memory_limit_bytes; by default the model's booking plus
memory_headroom_bytes): the server watches the host's resident set and kills the host past the limit; the host sets
RLIMIT_DATA on itself (the limit plus DATA_SLACK: private writable mappings, not the read-only mmap of weights nor
the address space a runtime only reserves, so onnxruntime, torch and llama.cpp still load), where an allocation
fails at once (Python's MemoryError in the host answers the request, the host lives on) before the resident set
could get there between two looks. Either way the request gets 400 `host_memory_limit`, and a host killed by the wall
is the request's failure (killed with that request as its culprit: `HostBlame.request_fault`), not a crash of the model.
"""

from __future__ import annotations

import contextlib
import os

from hypnos.config import ProcessConfig
from hypnos.engine import MemoryEstimate
from hypnos.errors import HypnosError, clip

MiB = 1024 * 1024
MEMORY_LIMIT_ENV = "HYPNOS_HOST_DATA_LIMIT"  # the RLIMIT_DATA (bytes) the host sets on itself at start
LIMIT_CODE = "host_memory_limit"
# RLIMIT_DATA counts private writable memory that is not (yet) resident too: thread stacks, malloc arenas, a
# runtime's committed pools. Measured on the six starter hosts after a request (VmData / VmRSS, MiB): qwen 911 / 1432,
# whisper 958 / 466, kokoro 493 / 405, piper 402 / 262, docling 348 / 157, minilm 247 / 183: all load under the wall.
DATA_SLACK = 2048 * MiB
BASE_GUESS_BYTES = 1024 * MiB  # what a host holds before its model loads, for the hard wall set at its start


def memory_limit(
    process: ProcessConfig, estimate: MemoryEstimate | None, base_bytes: int, *, moves_states: bool = False
) -> int | None:
    """The host's limit in bytes: configured, else base + booking + headroom; None when the wall is off (0).

    moves_states: the host saves and restores prompt states (the prompt cache, KV parking), so the booking holds one
    whole context's KV more: room for the states on their way (each one sequence's cells, held once; a save and a
    restore beside it hold different cells of the same context). Requests queued in the host with a found state hold
    theirs until they start, so several long ones at once can still take more: the headroom is for that."""
    if process.memory_limit_bytes is not None:
        return process.memory_limit_bytes or None
    booking = 0
    if estimate is not None:
        context = estimate.max_context_len or estimate.default_context_len
        kv = estimate.kv_bytes_per_token * context
        booking = estimate.weight_bytes + estimate.workspace_bytes + estimate.projector_bytes + kv
        if moves_states:
            booking += kv
    return base_bytes + booking + process.memory_headroom_bytes


def memory_limit_error(model_id: str, limit: int) -> HypnosError:
    """400 host_memory_limit: the request needed more memory than its engine host may take."""
    return HypnosError(
        400,
        "invalid_request_error",
        f"the request needed more memory than the engine host of `{clip(model_id)}` may take ({limit} bytes, "
        "[models.process] memory_limit_bytes); send a smaller input",
        code=LIMIT_CODE,
    )


def take_data_limit() -> int | None:
    """In the host: set RLIMIT_DATA from the environment (the server's figure); the limit, or None without one."""
    value = os.environ.get(MEMORY_LIMIT_ENV)
    if not value:
        return None
    import resource

    limit = int(value)
    with contextlib.suppress(ValueError, OSError):
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit if hard == resource.RLIM_INFINITY else min(limit, hard)))
    return limit
