"""What the conformance suite is given (ConformanceTarget) and the tools its checks share: counting and triggering
cancel tokens, a witness of the errors an engine raised itself, answer comparison, hiding a library, error shape."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.metadata
import importlib.util
import math
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from hypnos.config import ModelConfig
from hypnos.engine import CancelToken, Engine, EngineContext, EngineKind, method_table
from hypnos.errors import HypnosError
from hypnos.testing.clean_errors import assert_clean_message
from hypnos.types import LayerPlacementPlan, MemoryTier

MiB = 1024 * 1024
Request = Callable[[Engine, CancelToken], Awaitable[Any]]
# The error types of the spec (section 1); a 499 `cancelled` is what an engine may raise for a cancelled request.
SPEC_ERROR_TYPES = {
    "invalid_request_error", "authentication_error", "permission_error", "model_not_found", "model_disabled",
    "not_found", "model_busy", "rate_limit_exceeded", "insufficient_quota", "model_not_available",
    "deadline_unmeetable", "device_out_of_memory", "insufficient_memory", "server_error", "cancelled",
}  # fmt: skip


@dataclass(frozen=True)
class MissingLibrary:
    """How to make the engine's library look absent: modules to hide, distributions to hide, the package the
    error must name (as hypnos.engine.missing_library writes it)."""

    package: str
    modules: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()


@dataclass(frozen=True)
class EmbeddingFacts:
    """An embedding model's input facts: a text and its token ids (the model's own tokens, special tokens included),
    the vocabulary's size and the most tokens one input may hold."""

    text: str
    token_ids: list[int]
    vocab_size: int
    max_tokens: int


@dataclass
class ConformanceTarget:
    """What the suite needs: the engine kind, one model of it, the context, and one small request.

    `request(engine, cancel)` serves one request at tier 1 and returns its result (a streaming method: collect the
    stream). It must check the cancel token at two steps or more (several tokens, phrases, segments or inputs).
    `bad_request` sends input the engine must refuse with a 400 (the engine itself: a 400 raised by the request
    function fails the suite). `variants` are further requests with other inputs (the concurrency checks send them
    together; default: `request` thrice) and `same(a, b)` says whether two answers agree (default: same_answer).
    An embedding model gives `embedding` (token ids, vocabulary, context length). Memory: the RSS growth of a load
    to tier 1 plus one request must be at most the estimate x (1 + memory_tolerance) + memory_slack_bytes, and the
    estimate at most memory_over_factor x the resident set of its engine host after the same + memory_slack_bytes.
    """

    kind: EngineKind
    model_config: ModelConfig
    context: EngineContext
    request: Request
    bad_request: Request | None = None
    missing_library: MissingLibrary | None = None
    variants: list[Request] = field(default_factory=list)
    same: Callable[[Any, Any], bool] | None = None
    embedding: EmbeddingFacts | None = None
    memory_tolerance: float = 0.25
    memory_over_factor: float = 4.0
    memory_slack_bytes: int = 96 * MiB
    tier1_gpu_layers: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def make(self) -> Engine:
        """A fresh engine (tier 3) from the kind's factory."""
        return self.kind.factory(self.model_config, self.context)

    def plan(self, engine: Engine, tier: MemoryTier) -> LayerPlacementPlan:
        """The plan the scheduler would give: everything on the device at tier 1 when there is one."""
        if tier != MemoryTier.TIER1:
            return LayerPlacementPlan(primary_tier=tier)
        layers = self.tier1_gpu_layers
        if layers is None:
            layers = engine.estimate().num_layers if self.context.accelerator == "NvidiaCuda" else 0
        return LayerPlacementPlan(primary_tier=tier, gpu_layers=layers)

    def requests(self) -> list[Request]:
        """The requests the concurrency checks send together (three or more)."""
        return [self.request, *self.variants] if self.variants else [self.request] * 3

    def agree(self, one: Any, other: Any) -> bool:
        """Whether two answers to the same request agree."""
        return self.same(one, other) if self.same is not None else same_answer(one, other)


VECTOR = 8  # a list of this many numbers or more is a vector: compared by direction and length


def same_answer(one: Any, other: Any, rel: float = 1e-3, abs_: float = 1e-4) -> bool:
    """Equal as plain data, measuring fields aside (`timing`, `ms`, `*_ms`, `cached_tokens`): numbers up to
    rounding, vectors (lists of 8 numbers or more) by a cosine of 0.9999 or more and lengths within `rel` (a batched
    library call may sum in another order)."""
    one, other = msgspec.to_builtins(one, builtin_types=(bytes,)), msgspec.to_builtins(other, builtin_types=(bytes,))
    return _same(one, other, rel, abs_)


def _measures(key: str) -> bool:
    """A field that measures the run rather than answering: `timing`, `ms` and `*_ms` durations, and
    `cached_tokens` (how much of a prompt a cache held depends on what ran before)."""
    return key in ("timing", "ms", "cached_tokens") or key.endswith("_ms")


def _is_vector(value: Any) -> bool:
    return isinstance(value, list) and len(value) >= VECTOR and all(isinstance(x, int | float) for x in value)


def _same_vector(one: list[float], other: list[float], rel: float) -> bool:
    dot = sum(a * b for a, b in zip(one, other, strict=True))
    norm_one, norm_other = math.sqrt(sum(a * a for a in one)), math.sqrt(sum(b * b for b in other))
    if norm_one == 0 or norm_other == 0:
        return norm_one == norm_other
    return dot / (norm_one * norm_other) >= 0.9999 and math.isclose(norm_one, norm_other, rel_tol=rel)


def _same(one: Any, other: Any, rel: float, abs_: float) -> bool:
    if isinstance(one, dict) and isinstance(other, dict):
        keys = {key for key in set(one) | set(other) if not _measures(key)}
        return all(_same(one.get(key), other.get(key), rel, abs_) for key in keys)
    if _is_vector(one) and _is_vector(other):
        return len(one) == len(other) and _same_vector(one, other, rel)
    if isinstance(one, list) and isinstance(other, list):
        return len(one) == len(other) and all(_same(a, b, rel, abs_) for a, b in zip(one, other, strict=True))
    if isinstance(one, float) or isinstance(other, float):
        return (
            isinstance(one, int | float)
            and isinstance(other, int | float)
            and math.isclose(one, other, rel_tol=rel, abs_tol=abs_)
        )
    return bool(one == other)


def shared_calls(result: Any) -> int:
    """How many requests shared a library call with this answer (its timing's concurrent_slots; 1 when absent)."""
    timing = getattr(result, "timing", None)
    return int(getattr(timing, "concurrent_slots", None) or 1)


class CountingToken(CancelToken):
    """A cancel token that counts the engine's checks and cancels itself after `after` of them; `then` is called
    at check number `then_at` (to cancel another request mid-call)."""

    def __init__(self, after: int | None = None, then: Callable[[], None] | None = None, then_at: int = 0) -> None:
        super().__init__()
        self.after, self.then, self.then_at = after, then, then_at
        self.checks = 0
        self.checks_after_cancel = 0

    @property
    def cancelled(self) -> bool:
        """Counted; True from the check after `after` checks on."""
        self.checks += 1
        if self.then is not None and self.checks == self.then_at:
            self.then()
        if self.after is not None and self.checks > self.after:
            self.checks_after_cancel += 1
            self.cancel()
        return super().cancelled


class EngineWitness:
    """The engine as a request function sees it, remembering every error its modality methods raised: a refusal the
    engine made is among them, a 400 the request function raised by itself is not. `kind` adds its own methods to the
    core's table."""

    def __init__(self, engine: Engine, kind: EngineKind | None = None) -> None:
        self.engine = engine
        self.raised: list[BaseException] = []
        self.methods = method_table([kind] if kind is not None else [])

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.engine, name)
        if name not in self.methods:
            return method
        if self.methods[name].streams:

            async def stream(*args: Any) -> AsyncIterator[Any]:
                try:
                    async for item in method(*args):
                        yield item
                except BaseException as error:
                    self.raised.append(error)
                    raise

            return stream

        async def call(*args: Any) -> Any:
            try:
                return await method(*args)
            except BaseException as error:
                self.raised.append(error)
                raise

        return call

    def refused(self, error: BaseException) -> bool:
        """True when this error came out of one of the engine's modality methods."""
        return any(error is raised for raised in self.raised)


def resident_bytes() -> int:
    """This process's resident set size (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def hides(self, name: str) -> bool:
        return any(name == hidden or name.startswith(hidden + ".") for hidden in self.names)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if self.hides(name):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None


@contextlib.contextmanager
def hidden_library(missing: MissingLibrary) -> Iterator[None]:
    """Make the modules and distributions look uninstalled (restored afterwards)."""
    finder = _Hidden(missing.modules)
    saved = {name: module for name, module in sys.modules.items() if finder.hides(name)}
    for name in saved:
        del sys.modules[name]
    real_find_spec, real_distribution = importlib.util.find_spec, importlib.metadata.distribution

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if finder.hides(name) else real_find_spec(name, package)

    def distribution(name: str) -> Any:
        if name in missing.distributions:
            raise importlib.metadata.PackageNotFoundError(name)
        return real_distribution(name)

    sys.meta_path.insert(0, finder)
    importlib.util.find_spec, importlib.metadata.distribution = find_spec, distribution  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        importlib.util.find_spec, importlib.metadata.distribution = real_find_spec, real_distribution
        sys.modules.update(saved)


def described(value: Any, limit: int = 300) -> str:
    """A value as a failure message shows it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


async def refusal(call: Awaitable[Any], expected: str) -> HypnosError:
    """The HypnosError the call raises; when it answers instead, a failure naming what was expected and what the
    engine answered."""
    try:
        answer = await call
    except HypnosError as error:
        return error
    raise AssertionError(f"expected {expected}; the engine answered {described(answer)}")


def assert_spec_error(error: HypnosError, status: int | None = None) -> None:
    """The error has a documented status and type and encodes to the spec's body (each failure names the error)."""
    raised = f"the engine raised {error.status} {error.type}: {described(error.message)}"
    body = msgspec.json.decode(msgspec.json.encode(error.body()))
    assert set(body) == {"error"}, f"the error body holds {sorted(body)}, expected only `error`; {raised}"
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], f"an empty message; {raised}"
    assert body["error"]["type"] in SPEC_ERROR_TYPES, f"`{error.type}` is none of the spec's error types; {raised}"
    assert 400 <= error.status < 600, f"expected a 4xx or 5xx status; {raised}"
    assert_clean_message(error.message)
    if status is not None:
        assert error.status == status, f"expected a {status}; {raised}"
