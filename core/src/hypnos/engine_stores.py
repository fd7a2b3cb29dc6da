"""What an engine may use of the scheduler's stores: KV parking (ParkedSlot, KvPark) and the prompt cache
(CachedPrompt, PromptCache); part of the engine contract (hypnos.engine re-exports them)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ParkedSlot:
    """One slot's conversation: the tokens its KV cells hold and the engine's serialized sequence state."""

    seq_id: int
    tokens: list[int]
    state: bytes
    extra: Any = None  # engine-private facts restored with the state (e.g. positions after media)


class KvPark(Protocol):
    """What an engine may use of KV parking (section 14); the scheduler's store implements it (thread-safe)."""

    @property
    def enabled(self) -> bool:
        """False while parking is off: park() keeps nothing."""
        ...

    def park(self, model_id: str, layout: Hashable, slots: list[ParkedSlot]) -> bool:
        """Keep these slots for the model (replacing what it had parked); False when off, empty, above the cap, or
        larger than the room the tier-2 and process budgets leave (parked bytes are booked like a model's)."""
        ...

    def take(self, model_id: str, layout: Hashable) -> list[ParkedSlot]:
        """The model's parked slots, removed; none when the layout changed since they were parked."""
        ...


# A saved prompt state's bytes: a bytearray where the engine wrote it in place (no copy of a state is made)
SavedState = bytes | bytearray


@dataclass(frozen=True)
class CachedPrompt:
    """A saved prompt state found by prefix: the tokens its KV holds, the engine's sequence state, and its tier."""

    tokens: list[int]
    state: SavedState
    tier: str = "ram"  # where it was found: "ram" or "disk"


class PromptCache(Protocol):
    """What an engine may use of the prompt cache (the scheduler's store; thread-safe). Entries are keyed by the
    chain hashes of a prompt's fixed-size token blocks (hypnos.kit.prompt_cache), under a namespace that names the
    model file, the context layout and the isolation scope."""

    def save(
        self,
        model_id: str,
        namespace: str,
        tokens: list[int],
        state: SavedState,
        files: list[str],
        parked: bool = False,
    ) -> bool:
        """Keep a sequence state for `tokens` (`files`: the model files it depends on; a changed file drops it);
        `parked`: KV parking's, kept under its cap while parking is on and the model is out of tier 1."""
        ...

    def unpark(self, model_id: str) -> None:
        """The model is back in tier 1: its parked states become ordinary saved ones."""
        ...

    def lookup(self, model_id: str, namespace: str, tokens: list[int], longer_than: int) -> CachedPrompt | None:
        """The saved state sharing the longest block prefix with `tokens` when longer than `longer_than` tokens (what
        a slot already holds: counted as a slot hit), else None."""
        ...
