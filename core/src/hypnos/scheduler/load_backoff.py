"""A model whose load failed answers 503 model_not_available with the reason until a growing, capped backoff ends;
the first request after it tries the load again. An admin's enable, a pool replace or a good load forgets it."""

from __future__ import annotations

import math
from typing import Protocol

from hypnos.errors import HypnosError, clip
from hypnos.hosting.supervision import CrashPolicy

LOAD_BACKOFF_BASE_SECS = 5.0  # the wait after the first failed load; each further failure doubles it
LOAD_BACKOFF_MAX_SECS = 300.0
LOAD_FAILURE_WINDOW_SECS = 3600.0  # failures older than this no longer lengthen the wait
REASON_LIMIT = 300


class BackingOff(Protocol):
    """What the backoff reads and keeps of a model (scheduler.state.ModelState)."""

    load_error: str | None
    load_backoff: CrashPolicy

    @property
    def id(self) -> str: ...


def load_backoff_policy() -> CrashPolicy:
    """The hosts' crash policy, tuned for failed loads: a wait from the first failure, never exhausted."""
    return CrashPolicy(
        max_crashes=2**31,
        window_secs=LOAD_FAILURE_WINDOW_SECS,
        base_secs=LOAD_BACKOFF_BASE_SECS,
        max_secs=LOAD_BACKOFF_MAX_SECS,
        free_crashes=0,
    )


def is_load_failure(error: BaseException) -> bool:
    """A failure of the model itself (weights refused, engine error, its host died), not memory or cancellation."""
    if not isinstance(error, Exception):
        return False
    return not isinstance(error, HypnosError) or error.status in (500, 503)


def record_load_failure(state: BackingOff, error: BaseException, now: float) -> None:
    """Remember why the load failed and start (or lengthen) the backoff."""
    # a library's own exception text goes to the log only (tiers logs it): error bodies carry none
    reason = error.message if isinstance(error, HypnosError) else "the engine failed; the server log has the cause"
    state.load_error = clip(reason, REASON_LIMIT)
    state.load_backoff.record(now)


def forget_load_failures(state: BackingOff) -> None:
    """The model loaded, was enabled by an admin, or was replaced: no backoff any more."""
    state.load_error = None
    state.load_backoff.reset()


def backoff_left(state: BackingOff, now: float) -> float:
    """Seconds until the model may try to load again (0: it may now, or its last load did not fail)."""
    return 0.0 if state.load_error is None else state.load_backoff.backoff_secs(now)


def load_failure_reason(state: BackingOff, now: float) -> str | None:
    """`unavailable_reason` while the backoff runs: the failure and when the next try may happen."""
    if state.load_error is None:
        return None
    wait = backoff_left(state, now)
    if wait <= 0:
        return f"loading failed ({state.load_error}); the next request tries again"
    return f"loading failed ({state.load_error}); the next try is in {math.ceil(wait)} s"


def refuse_while_backing_off(state: BackingOff, now: float) -> None:
    """503 model_not_available with the reason and Retry-After while the model's backoff runs."""
    wait = backoff_left(state, now)
    if wait <= 0:
        return
    seconds = max(1, math.ceil(wait))
    raise HypnosError(
        503,
        "model_not_available",
        f"the model `{state.id}` failed to load ({state.load_error}); the next try is in {seconds} s "
        f"(an admin's POST /v1/models/{state.id}/enable retries at once)",
        retry_after=seconds,
    )
