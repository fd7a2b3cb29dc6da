"""Per-key usage kept across worker restarts: each key's UTC day of tokens and its last minute of request times, in
`usage.json` under the data dir (written within a second of a change and at shutdown; a full disk is logged and the
write tried again at the next change)."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import msgspec

logger = logging.getLogger(__name__)

FILE_NAME = "usage.json"


class KeyUsage(msgspec.Struct, kw_only=True):
    """One key's persisted usage: the UTC day its tokens count for, the tokens, its recent requests (unix seconds)."""

    day: str
    tokens: int = 0
    recent: list[float] = []


class UsageFile:
    """Where the limiter's per-key usage survives a restart of the worker."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE_NAME
        self._failing = False

    def load(self) -> dict[str, KeyUsage]:
        """The usage saved last, by key label ({} when there is none or it cannot be read)."""
        try:
            return msgspec.json.decode(self.path.read_bytes(), type=dict[str, KeyUsage])
        except FileNotFoundError:
            return {}
        except (OSError, msgspec.DecodeError) as error:
            logger.warning("the per-key usage in %s cannot be read (%s); starting from none", self.path, error)
            return {}

    def save(self, usage: dict[str, KeyUsage]) -> bool:
        """Replace the file with `usage` (old or new content after a crash); False when the disk refused."""
        temp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=self.path.parent)
            with os.fdopen(handle, "wb") as out:
                out.write(msgspec.json.encode(usage))
            os.replace(temp, self.path)
        except OSError as error:
            if temp is not None:
                Path(temp).unlink(missing_ok=True)
            if not self._failing:
                logger.error(
                    "the per-key usage could not be saved to %s (%s); retried at the next change", self.path, error
                )
            self._failing = True
            return False
        self._failing = False
        return True
