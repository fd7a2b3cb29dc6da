"""Measured placement's figures: one model's last measure, kept beside the config file, and the corrected estimate."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import msgspec

from hypnos.engine import MemoryEstimate

logger = logging.getLogger(__name__)


class MeasuredFigures(msgspec.Struct, kw_only=True):
    """One model's last measure: what its estimate booked, what its host held, and the factor the next estimate
    takes; `estimate_bytes` (the engine's own weight figure) ties it to the files it was measured on."""

    booked_bytes: int
    measured_bytes: int
    ratio: float
    estimate_bytes: int
    unix: int


def measured_path(config_source: str | None) -> Path | None:
    """`<config>.measured.json` beside the config file (None without a config file: kept in memory only)."""
    if config_source is None:
        return None
    source = Path(config_source)
    return source.with_name(f"{source.stem}.measured.json")


class MeasuredStore:
    """Every model's MeasuredFigures, in memory and (with a path) in a JSON file replaced atomically on each change."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.figures: dict[str, MeasuredFigures] = {}
        if path is not None and path.is_file():
            try:
                self.figures = msgspec.json.decode(path.read_bytes(), type=dict[str, MeasuredFigures])
            except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
                logger.warning("ignoring the measured figures in %s: %s", path, error)

    def ratio(self, model_id: str, estimate: MemoryEstimate) -> float:
        """The correction the model's estimate takes (1.0 when never measured, or measured on other files)."""
        figures = self.figures.get(model_id)
        if figures is None or figures.estimate_bytes != estimate.weight_bytes:
            return 1.0
        return figures.ratio

    def put(self, model_id: str, figures: MeasuredFigures) -> None:
        """Keep the model's figures and write the file (temp file, fsync, rename: never half written)."""
        self.figures[model_id] = figures
        if self.path is None:
            return
        data = json.dumps({k: msgspec.to_builtins(v) for k, v in sorted(self.figures.items())}, indent=1)
        try:
            fd, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as error:
            logger.warning("could not write the measured figures to %s: %s", self.path, error)


def scaled_estimate(estimate: MemoryEstimate, ratio: float) -> MemoryEstimate:
    """The estimate with every byte figure multiplied by `ratio` (1.0: the estimate itself)."""
    if ratio == 1.0:
        return estimate

    def scale(value: int) -> int:
        return round(value * ratio)

    return msgspec.structs.replace(
        estimate,
        weight_bytes=scale(estimate.weight_bytes),
        layer_bytes=[scale(b) for b in estimate.layer_bytes],
        non_layer_bytes=scale(estimate.non_layer_bytes),
        kv_bytes_per_token=scale(estimate.kv_bytes_per_token),
        workspace_bytes=scale(estimate.workspace_bytes),
        expert_bytes_per_layer=[scale(b) for b in estimate.expert_bytes_per_layer],
        projector_bytes=scale(estimate.projector_bytes),
    )
