"""Range and shape checks of a `[[models]]` block, shared by the startup config and the pool routes.

Each check returns the problems it found as `key`: message strings (the key relative to the model, e.g. `slots`);
the config loader prefixes them with the file and `models[i]` and raises ConfigError.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from hypnos.errors import clip

# Model ids: letters, digits, `.`, `_`, `-` and `:`, starting with a letter or digit. No `/`: the routes
# (`/v1/models/{id}`) address one path segment and refuse an encoded `/`, so such a model could never be replaced.
MODEL_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
MAX_MODEL_ID_CHARS = 128
MAX_SLOTS = 1024
MAX_CONTEXT_LEN = 1 << 24  # 16M tokens
MAX_PATH_CHARS = 4096
MAX_ARCH_KEYS = 64
MAX_ARCH_TEXT_CHARS = 256
MAX_ARCH_LIST_ITEMS = 1024
MAX_SIZE_VALUE = 1 << 50  # 1 PiB: the largest byte count (or count of anything) an arch value may give
MAX_NESTING = 8  # tables and arrays inside one model block
MAX_BLOCK_CHARS = 64 * 1024  # the TOML text of one [[models]] block sent to POST/PUT /v1/models
PATH_KEYS = ("weights_path", "aux_path", "text_encoder_path", "tokenizer_path", "voices_path")
_ARCH_KEY = re.compile(r"[A-Za-z0-9_.]{1,64}")


class CheckedModel(Protocol):
    """What the checks read of a model block (config.ModelConfig; its PATH_KEYS are read by name)."""

    @property
    def id(self) -> str: ...
    @property
    def slots(self) -> int: ...
    @property
    def context_len(self) -> int | None: ...
    @property
    def arch(self) -> dict[str, Any]: ...


def id_problem(model_id: str) -> str | None:
    """Why a model id is not usable, or None."""
    if len(model_id) > MAX_MODEL_ID_CHARS:
        return f"`id`: at most {MAX_MODEL_ID_CHARS} characters, got {len(model_id)}"
    if not MODEL_ID_PATTERN.fullmatch(model_id):
        return (
            f"`id`: {model_id[:MAX_MODEL_ID_CHARS]!r} is not a model id: use letters, digits, `.`, `_`, `-` and `:`, "
            "starting with a letter or digit"
        )
    return None


def path_problem(key: str, value: str) -> str | None:
    """Why a path value is not usable (too long, NUL or another control character), or None."""
    if len(value) > MAX_PATH_CHARS:
        return f"`{key}`: a path of at most {MAX_PATH_CHARS} characters, got {len(value)}"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        return f"`{key}`: the path contains a NUL or another control character"
    if not value.strip():
        return f"`{key}`: expected a non-empty path"
    return None


def nesting_depth(value: Any, limit: int) -> int:
    """How deep tables and arrays nest in `value`, counted without recursion and up to `limit` + 1."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth) for child in children)
    return deepest


def _arch_problems(arch: dict[str, Any]) -> list[str]:
    """[models.arch]: a few scalar facts (or short lists of them) with sane names and values."""
    if len(arch) > MAX_ARCH_KEYS:
        return [f"`arch`: at most {MAX_ARCH_KEYS} keys, got {len(arch)}"]
    problems = []
    for key, value in arch.items():
        if not _ARCH_KEY.fullmatch(key):
            problems.append(f"`arch`: {key[:64]!r} is not an architecture key (letters, digits, `_` and `.`)")
            continue
        values = value if isinstance(value, list) else [value]
        if len(values) > MAX_ARCH_LIST_ITEMS:
            problems.append(f"`arch.{key}`: at most {MAX_ARCH_LIST_ITEMS} items, got {len(values)}")
            continue
        for item in values:
            problem = _arch_value_problem(key, item)
            if problem:
                problems.append(problem)
                break
    return problems


def _arch_value_problem(key: str, value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        least = 1 if "layer" in key else 0
        if not least <= value <= MAX_SIZE_VALUE:
            return f"`arch.{key}`: expected a number between {least} and {MAX_SIZE_VALUE}, got {value}"
        return None
    if isinstance(value, str):
        if len(value) > MAX_ARCH_TEXT_CHARS:
            return f"`arch.{key}`: at most {MAX_ARCH_TEXT_CHARS} characters"
        return None
    return f"`arch.{key}`: expected a number, a boolean, a string or a list of them"


def model_problems(model: CheckedModel) -> list[str]:
    """Every range and shape problem of one model block, as `key`: message."""
    problems = []
    id_issue = id_problem(model.id)
    if id_issue:
        problems.append(id_issue)
    if not 1 <= model.slots <= MAX_SLOTS:
        problems.append(f"`slots`: expected an integer between 1 and {MAX_SLOTS}, got {model.slots}")
    if model.context_len is not None and not 1 <= model.context_len <= MAX_CONTEXT_LEN:
        problems.append(f"`context_len`: expected an integer between 1 and {MAX_CONTEXT_LEN}, got {model.context_len}")
    for key in PATH_KEYS:
        value = getattr(model, key)
        if value is not None:
            issue = path_problem(key, value)
            if issue:
                problems.append(issue)
    problems += _arch_problems(model.arch)
    return problems


def raw_model_problem(entry: Any) -> str | None:
    """A shape problem of a raw `[[models]]` table found before it is decoded (nesting), or None."""
    if nesting_depth(entry, MAX_NESTING) > MAX_NESTING:
        return f"tables and arrays nest more than {MAX_NESTING} deep"
    return None


# [models.process] env a block sent to the pool API may set: device selection and thread tuning. The config file
# itself may set any variable; over HTTP, LD_PRELOAD, PYTHONPATH and the like would run code in the engine host.
POOL_ENV_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "TOKENIZERS_PARALLELISM",
        "PYTORCH_CUDA_ALLOC_CONF",
    }
)
POOL_ENV_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "GOMP_", "KMP_", "GGML_CUDA_")


def pool_env_problems(env: dict[str, str]) -> list[str]:
    """The `process.env` names a pool API block may not set (any name outside the allow-list)."""
    refused = sorted(name for name in env if name not in POOL_ENV_NAMES and not name.startswith(POOL_ENV_PREFIXES))
    if not refused:
        return []
    allowed = ", ".join([*sorted(POOL_ENV_NAMES), *(f"{prefix}*" for prefix in POOL_ENV_PREFIXES)])
    names = ", ".join(f"`{clip(name, 64)}`" for name in refused[:5])
    return [
        f"`process.env`: {names} may not be set through the pool API (allowed: {allowed}); set it in the config file"
    ]
