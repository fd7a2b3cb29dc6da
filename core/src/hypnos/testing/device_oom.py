"""For a plugin's 507 tests: a real engine whose library fails to allocate device memory at its own call site, served
from an engine host beside an idle fake model (the eviction the retry makes room with)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypnos.config import settings_from_mapping
from hypnos.plugins import collect_engine_kinds, make_plugin_manager
from hypnos.scheduler import Scheduler
from hypnos.testing.fake_engine import fake_engine_kind
from hypnos.types import Modality

OOM_TIMES_ENV = "HYPNOS_TEST_OOM_TIMES"  # how many calls fail, in the host


class Failing:
    """Wraps a library object: `method` raises `error()` the first OOM_TIMES_ENV calls, then calls through."""

    def __init__(self, inner: Any, method: str, error: Callable[[], BaseException]) -> None:
        self._inner, self._method, self._error = inner, method, error
        self._left = int(os.environ.get(OOM_TIMES_ENV, "1"))

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name != self._method:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._left > 0:
                self._left -= 1
                raise self._error()
            return value(*args, **kwargs)

        return call


def failing_scheduler(
    models_dir: Path, table: dict[str, Any], factory: Callable[..., Any], ooms: int, folder: Path
) -> Scheduler:
    """`table`'s model served by `factory` (a subclass of its engine, defined in a module of `folder`, which the
    host imports) in an engine host whose library fails `ooms` times, beside an idle fake model `idle`."""
    sys.path.insert(0, str(folder))
    env = {"PYTHONPATH": str(folder), OOM_TIMES_ENV: str(ooms)}
    failing = {**table, "engine": "failing", "process": {"env": env}}
    idle = {
        "id": "idle",
        "modality": "text_generation",
        "engine": "fake",
        "fake": {"layers": 1, "layer_bytes": 1 << 20},
    }
    raw = {"models_dir": str(models_dir), "server": {"isolation": "process"}, "models": [failing, idle]}
    kinds = collect_engine_kinds(make_plugin_manager(autoload=True))
    kind = dataclasses.replace(kinds[table["engine"]], name="failing", factory=factory)
    return Scheduler(settings_from_mapping(raw), {"failing": kind, "fake": fake_engine_kind()})


async def load_idle(scheduler: Scheduler) -> None:
    """Bring the idle fake model to tier 1 (what the eviction after an OOM frees)."""
    async with scheduler.lease("idle", Modality.TEXT_GENERATION):
        pass
