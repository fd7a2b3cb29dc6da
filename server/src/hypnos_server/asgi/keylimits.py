"""Per-key limits of section 2: requests_per_minute (sliding 60 s), max_concurrent, tokens_per_day (UTC day); the
minute and the day survive a restart of the worker when a UsageFile keeps them."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hypnos.errors import HypnosError

from hypnos_server.asgi.usage_file import KeyUsage, UsageFile

if TYPE_CHECKING:
    from hypnos_server.asgi.keys import ApiKey

WINDOW_SECS = 60.0
SAVE_SECS = 1.0  # a change of usage is saved within this long


def rate_limited(code: str, message: str, retry_after: int) -> HypnosError:
    """429 rate_limit_error with param null, the limit's code and Retry-After."""
    return HypnosError(429, "rate_limit_error", message, code=code, retry_after=max(1, retry_after))


@dataclass
class _Usage:
    recent: deque[float] = field(default_factory=deque)
    in_flight: int = 0
    day: dt.date | None = None
    tokens: int = 0


class Permit:
    """A held concurrency slot of one key; release() is idempotent."""

    def __init__(self, usage: _Usage | None) -> None:
        self._usage = usage

    def release(self) -> None:
        """Give the slot back."""
        if self._usage is not None:
            self._usage.in_flight -= 1
            self._usage = None


class KeyLimiter:
    """Admits requests against their key's limits and charges tokens after the response."""

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        today: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        store: UsageFile | None = None,
    ) -> None:
        self._monotonic = monotonic
        self._now = today
        self._usage: dict[str, _Usage] = {}
        self._store = store
        self._save_pending = False
        if store is not None:
            self._restore(store.load())

    def _restore(self, saved: dict[str, KeyUsage]) -> None:
        """Take back the usage a previous worker saved (request times moved onto this process's clock)."""
        now, wall = self._monotonic(), self._now().timestamp()
        for label, kept in saved.items():
            try:
                day = dt.date.fromisoformat(kept.day)
            except ValueError:
                continue
            # a time a little ahead of this clock (the file keeps milliseconds; the wall clock may step back) is now
            ages = [max(0.0, wall - at) for at in kept.recent]
            recent = deque(sorted(now - age for age in ages if age < WINDOW_SECS))
            self._usage[label] = _Usage(recent=recent, day=day, tokens=max(0, kept.tokens))

    def _changed(self) -> None:
        """Save the usage within SAVE_SECS (at once when no event loop runs)."""
        if self._store is None or self._save_pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.save()
            return
        self._save_pending = True
        loop.call_later(SAVE_SECS, self.save)

    def save(self) -> None:
        """Write every key's usage now (a full disk is logged, and the next change tries again)."""
        self._save_pending = False
        if self._store is None:
            return
        now, wall = self._monotonic(), self._now().timestamp()
        self._store.save(
            {
                label: KeyUsage(
                    day=usage.day.isoformat(),
                    tokens=usage.tokens,
                    recent=[round(wall - (now - at), 3) for at in usage.recent],
                )
                for label, usage in self._usage.items()
                if usage.day is not None and (usage.tokens or usage.recent)
            }
        )

    def _for(self, key: ApiKey) -> _Usage:
        usage = self._usage.setdefault(key.label, _Usage())
        today = self._now().date()
        if usage.day != today:
            usage.day = today
            usage.tokens = 0
        return usage

    def admit(self, key: ApiKey, concurrent: bool = True) -> Permit:
        """A permit for one request, or 429 rate_limit_error naming the exhausted limit; `concurrent` False: a
        request that takes no concurrency slot (its permit holds none)."""
        usage = self._for(key)
        now = self._monotonic()
        while usage.recent and usage.recent[0] <= now - WINDOW_SECS:
            usage.recent.popleft()
        if key.tokens_per_day is not None and usage.tokens >= key.tokens_per_day:
            raise rate_limited(
                "tokens_per_day",
                f"The key {key.label} used its {key.tokens_per_day} tokens for today (UTC)",
                self._secs_to_midnight(),
            )
        if key.requests_per_minute is not None and len(usage.recent) >= key.requests_per_minute:
            wait = math.ceil(usage.recent[0] + WINDOW_SECS - now)
            raise rate_limited(
                "requests_per_minute",
                f"The key {key.label} is limited to {key.requests_per_minute} requests per minute",
                wait,
            )
        if concurrent and key.max_concurrent is not None and usage.in_flight >= key.max_concurrent:
            raise rate_limited(
                "max_concurrent",
                f"The key {key.label} is limited to {key.max_concurrent} concurrent requests",
                1,
            )
        if key.requests_per_minute is not None:  # only a limited key keeps its last minute of request times
            usage.recent.append(now)
            self._changed()
        if not concurrent:
            return Permit(None)
        usage.in_flight += 1
        return Permit(usage)

    def charge(self, key: ApiKey, tokens: int) -> None:
        """Add a finished request's tokens to its key's UTC day."""
        if tokens > 0:
            self._for(key).tokens += tokens
            self._changed()

    def remaining(self, key: ApiKey) -> list[tuple[str, int, int, float]]:
        """The key's limited budgets as (name, limit, remaining, seconds to reset): `requests` (requests_per_minute)
        and `tokens` (tokens_per_day), those it has."""
        usage = self._for(key)
        now = self._monotonic()
        while usage.recent and usage.recent[0] <= now - WINDOW_SECS:
            usage.recent.popleft()
        budgets = []
        if key.requests_per_minute is not None:
            reset = usage.recent[0] + WINDOW_SECS - now if usage.recent else 0.0
            left = max(0, key.requests_per_minute - len(usage.recent))
            budgets.append(("requests", key.requests_per_minute, left, round(reset, 3)))
        if key.tokens_per_day is not None:
            left = max(0, key.tokens_per_day - usage.tokens)
            budgets.append(("tokens", key.tokens_per_day, left, float(self._secs_to_midnight())))
        return budgets

    def tokens_today(self, key: ApiKey) -> int:
        """Tokens the key used today (UTC)."""
        return self._for(key).tokens

    def in_flight(self, key: ApiKey) -> int:
        """Requests of this key whose response is not fully sent."""
        return self._for(key).in_flight

    def _secs_to_midnight(self) -> int:
        now = self._now()
        tomorrow = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
        return math.ceil((tomorrow - now).total_seconds())
