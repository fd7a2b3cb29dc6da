"""HostedEngine: the Engine the scheduler drives for a model whose engine runs in a host process of its own.

Tier 3 is no host at all; a load starts one (and builds the engine there), a demotion to tier 2 keeps it with the
weights warm, a demotion to tier 3 or an unload ends it, which frees everything the library held. Memory estimates,
modalities and capabilities come from a local instance of the engine, which never loads anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from hypnos.config import ModelConfig
from hypnos.engine import (
    CancelToken,
    Engine,
    EngineCapabilities,
    EngineContext,
    EngineKind,
    EngineUnavailable,
    MemoryEstimate,
    method_table,
)
from hypnos.engine_methods import forward_core_methods, forwarder
from hypnos.errors import HypnosError, clip
from hypnos.hardware import nvml_process_vram
from hypnos.hosting.host import HOST_ENV, HOST_NICE_ENV, HostStart
from hypnos.hosting.memory_wall import BASE_GUESS_BYTES, DATA_SLACK, MEMORY_LIMIT_ENV, memory_limit
from hypnos.hosting.process import HostProcess
from hypnos.hosting.supervision import CrashPolicy, EngineProcessInfo, HostBlame, rss_bytes
from hypnos.types import LayerPlacementPlan, MemoryTier, Modality, TierSwitchPhases

logger = logging.getLogger(__name__)

UNLOAD_SECS = 30.0  # how long a host may take to unload before it is ended anyway


def host_factory_path(factory: Callable[..., Any]) -> str | None:
    """`module:qualname` of an engine factory a host process can import, or None (a lambda, a local function)."""
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}"


def host_environment(model: ModelConfig, kind: EngineKind) -> dict[str, str]:
    """The host's environment: the server's, the engine kind's measured defaults, then the model's own settings."""
    env = dict(os.environ)
    env.update(kind.process_env)
    process = model.process
    if process.omp_wait_policy is not None:
        env["OMP_WAIT_POLICY"] = process.omp_wait_policy
        if (
            "GOMP_SPINCOUNT" in kind.process_env
        ):  # the kind's spin count would win over the policy: back to the server's
            env.pop("GOMP_SPINCOUNT")
            if "GOMP_SPINCOUNT" in os.environ:
                env["GOMP_SPINCOUNT"] = os.environ["GOMP_SPINCOUNT"]
    if process.threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(process.threads)
    env.update(process.env)
    env[HOST_ENV] = model.id
    env[HOST_NICE_ENV] = str(kind.process_nice if process.nice is None else process.nice)
    # the host logs at the server's level unless told otherwise (its lines go to the server's stderr)
    env.setdefault("HYPNOS_HOST_LOG_LEVEL", logging.getLevelName(logging.getLogger().getEffectiveLevel()))
    return env


class HostedEngine(Engine):
    """The scheduler's engine for a model served from a host process; `on_exit(model_id, reason, exhausted)` hears
    of a host that died on its own (exhausted: too many crashes in the window, no restart until re-enabled)."""

    isolation = "process"

    def __init__(
        self,
        model: ModelConfig,
        context: EngineContext,
        kind: EngineKind,
        factory_path: str,
        on_exit: Callable[[str, str, bool], None] | None = None,
    ) -> None:
        super().__init__(model, context)
        self.kind, self.factory_path, self.on_exit = kind, factory_path, on_exit
        self.local = kind.factory(model, context)  # estimates and capabilities; never loaded
        self.policy = CrashPolicy.of(model.process)
        self.host: HostProcess | None = None
        self.last_exit: str | None = None  # why the last host ended on its own
        self.quarantined = False  # too many crashes: no restart until an admin enables the model
        self._capabilities: EngineCapabilities | None = None
        self.base_rss = 0  # the host's resident set when it started (interpreter and engine factory, no model)
        self.cores: list[int] = []  # the scheduler's last core share: a new host is pinned to it at its start
        self.alone = False  # whether no other model computed when that share was given

    # ---- what the server asks before any load ---------------------------------------------------------------------

    def served_modalities(self) -> list[Modality]:
        """The local instance's answer (it reads the model's files)."""
        return self.local.served_modalities()

    def estimate(self) -> MemoryEstimate:
        """The local instance's estimate (headers only)."""
        return self.local.estimate()

    def capabilities(self) -> EngineCapabilities:
        """What the loaded engine reported, else the local instance's answer."""
        return self._capabilities or self.local.capabilities()

    @property
    def unavailable_reason(self) -> str | None:
        """Why the model has no host now when its last one died on its own (None while one runs)."""
        if self.host is not None and self.host.alive:
            return None
        if self.quarantined:
            crashes = len(self.policy.crashes)
            return f"{self.last_exit}; quarantined after {crashes} crashes until an admin enables the model"
        return self.last_exit

    def process_info(self) -> EngineProcessInfo | None:
        """`engine_process` for the status: pid, measured RSS (and NVML's VRAM figure on a GPU), restarts, start time
        (None while no host runs)."""
        host = self.host
        pid = host.pid if host is not None else None
        if host is None or pid is None:
            return None
        vram = nvml_process_vram(pid) if self.context.accelerator == "NvidiaCuda" else None
        return EngineProcessInfo(
            pid=pid,
            rss_bytes=rss_bytes(pid),
            restarts=self.policy.restarts,
            started_at=round(host.started_at, 3),
            vram_bytes=vram,
            stalled_secs=host.stalled_secs(),
        )

    def refusal(self, owner: str | None) -> HypnosError | None:
        """429 rate_limit_error for a key whose requests ended this model's host too often in the crash window
        (refused before the model would be quarantined); None for any other caller."""
        if not owner:
            return None
        wait = self.policy.key_refused_secs(owner, time.monotonic())
        if wait is None:
            return None
        window = self.policy.window_secs
        message = (
            f"The key {owner} may not use the model `{clip(self.model.id)}` for {wait:.0f} s: its requests ended the "
            f"model's engine host {self.policy.key_limit} times within {window:g} s (last: {self.last_exit})"
        )
        return HypnosError(429, "rate_limit_error", message, code="engine_crashes", retry_after=int(wait) + 1)

    @property
    def hang_secs(self) -> float:
        """How long a request may go without progress before the host is killed: the model's [models.process]
        hang_secs, else its engine kind's default."""
        configured = self.model.process.hang_secs
        return configured if configured is not None else self.kind.hang_secs

    def held_bytes(self, on_device: bool) -> int | None:
        """What the host holds for the model now: NVML's figure for its process with `on_device` (a GPU), else its
        resident set's growth since it started (None while no host runs, or without a figure)."""
        host = self.host
        pid = host.pid if host is not None else None
        if pid is None:
            return None
        if on_device:
            return nvml_process_vram(pid)
        rss = rss_bytes(pid)
        return max(0, rss - self.base_rss) if rss else None

    # ---- lifecycle --------------------------------------------------------------------------------------------------

    async def _ensure_host(self) -> HostProcess:
        running = self.host
        if running is not None and running.alive:
            return running
        wait = self.policy.backoff_secs(time.monotonic())
        if wait > 0:
            logger.info("restarting the engine host of %s in %.1f s", self.model.id, wait)
            await asyncio.sleep(wait)
        env = host_environment(self.model, self.kind)
        estimate = self._estimate_or_none()
        wall = memory_limit(self.model.process, estimate, BASE_GUESS_BYTES, moves_states=self._moves_states())
        if wall is not None and self.context.accelerator == "Cpu":  # a GPU runtime's host mappings: the watch alone
            env[MEMORY_LIMIT_ENV] = str(wall + DATA_SLACK)
        host = HostProcess(
            self.model.id,
            self.model.process,
            env,
            on_ask=self._answer,
            on_note=self._note,
            on_exit=lambda reason, blame: self._exited(host, reason, blame),
            hang_secs=self.hang_secs,
            stream_timeout_secs=self.context.limits.stream_timeout_secs,
        )
        self.host = host
        if self.last_exit is not None:  # the last host died on its own: this one is a restart
            self.policy.restarts += 1
        try:
            await host.start(self._start_message())
        except BaseException:
            await host.stop(1.0)
            if self.host is host:
                self.host = None
            raise
        self.last_exit = None
        self.base_rss = rss_bytes(host.pid) if host.pid is not None else 0
        host.memory_limit = memory_limit(self.model.process, estimate, self.base_rss, moves_states=self._moves_states())
        if self.cores:
            await host.call("follow_cores", (self.cores, self.alone))
        return host

    def _moves_states(self) -> bool:
        """Whether the host saves and restores prompt states: the model's prompt cache, or KV parking, is on as it
        starts (parking turned on later is booked from the host's next start)."""
        cached = self.context.prompt_cache is not None and self.model.prompt_cache.enabled
        return cached or (self.context.kv_park is not None and self.context.kv_park.enabled)

    def _estimate_or_none(self) -> MemoryEstimate | None:
        try:
            return self.local.estimate()
        except Exception:  # the load itself says what is wrong with the model's files
            return None

    def _start_message(self) -> HostStart:
        context = self.context
        return HostStart(
            model=self.model,
            factory=self.factory_path,
            models_dir=str(context.models_dir),
            limits=context.limits,
            accelerator=context.accelerator,
            kv_idle_timeout_secs=context.kv_idle_timeout_secs,
            options=dict(context.options.get(self.model.id, {})),
            share_dir="",
            kv_park=context.kv_park is not None,
            prompt_cache=context.prompt_cache is not None,
            cache_dir=str(context.cache_dir) if context.cache_dir else None,
            extra=dict(context.extra),
            methods={method.name: method.streams for method in method_table([self.kind]).values()},
        )

    def _exited(self, host: HostProcess, reason: str, blame: HostBlame) -> None:
        """A host died on its own: count the crash (unless a request's own fault brought it down), charge the keys
        whose requests ran, and let the scheduler drop the model to tier 3."""
        if self.host is not host:
            return
        self.host = None
        self._capabilities = None
        self.last_exit = reason
        now = time.monotonic()
        if not blame.request_fault:
            self.policy.record(now)
        for owner in blame.owners:
            self.policy.charge(owner, now)
        self.quarantined = self.policy.exhausted(now)
        if self.on_exit is not None:
            self.on_exit(self.model.id, reason, self.quarantined)

    def _answer(self, name: str, payload: Any) -> Any:
        """The engine's questions, answered from the server's side (KV parking, the prompt cache: a coroutine that
        saves or looks up on a thread, the disk tier's reads kept off the event loop)."""
        cache = self.context.prompt_cache
        if name in ("pc_save", "pc_lookup", "pc_unpark"):
            if cache is None:
                return None
            calls: dict[str, Callable[..., Any]] = {
                "pc_save": cache.save,
                "pc_lookup": cache.lookup,
                "pc_unpark": cache.unpark,
            }
            return asyncio.to_thread(calls[name], *payload)
        store = self.context.kv_park
        if store is None:
            return None if name != "kv_take" else []
        if name == "kv_enabled":
            return store.enabled
        if name == "kv_park":
            model_id, layout, slots = payload
            return store.park(model_id, layout, slots)
        if name == "kv_take":
            model_id, layout = payload
            return store.take(model_id, layout)
        return None

    def _note(self, payload: Any) -> None:
        if isinstance(payload, tuple) and payload and payload[0] == "context_resized":
            _, model_id, cells = payload
            if self.context.context_resized is not None:
                self.context.context_resized(model_id, cells)
        elif isinstance(payload, tuple) and payload and payload[0] == "threads":
            _, model_id, threads = payload
            if self.context.threads_changed is not None:
                self.context.threads_changed(model_id, threads)

    async def follow_cores(self, cores: list[int], alone: bool = False) -> int | None:
        """Pin the host's threads to the share and tell its engine (a host started later is pinned at its start);
        the threads the engine computes with now, where it reports them."""
        self.cores, self.alone = list(cores), alone
        host = self.host
        if host is None or not host.alive:
            return None
        threads = await host.call("follow_cores", (self.cores, alone))
        return None if threads is None else int(threads)

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        """Start a host when none runs, and load the model there as the plan says."""
        host = await self._ensure_host()
        phases: TierSwitchPhases = await host.call("load", (plan,))
        self._capabilities = await host.call("capabilities", ())
        return phases

    async def demote(self, tier: MemoryTier) -> None:
        """Tier 2: the host keeps the weights warm; tier 3: the host ends."""
        if tier == MemoryTier.TIER3:
            await self.unload()
            return
        host = self.host
        if host is not None and host.alive:
            await host.call("demote", (tier,))

    async def unload(self) -> None:
        """Unload in the host (bounded), then end it: every byte the library held goes with the process."""
        host, self.host = self.host, None
        self._capabilities = None
        if host is None:
            return
        if host.alive:
            try:
                await asyncio.wait_for(host.call("unload", ()), UNLOAD_SECS)
            except Exception as error:
                logger.warning("unloading %s in its host failed (%s); ending the host", self.model.id, error)
        await host.stop(self.context_grace())

    def context_grace(self) -> float:
        """How long a host may take to leave once asked."""
        return 5.0

    async def kill(self) -> None:
        """End the host now, whatever it is doing (server shutdown past its grace)."""
        host, self.host = self.host, None
        if host is not None:
            host.stopping = True
            host.kill("the server is shutting down")
            await host.exited.wait()

    # ---- modalities -------------------------------------------------------------------------------------------------

    def _running(self) -> HostProcess:
        host = self.host
        if host is None or not host.alive:  # tier 3 (never loaded, unloaded, or its host died): as engines say
            raise EngineUnavailable(f"the model `{self.model.id}` is not loaded")
        return host

    async def _call_in_host(self, name: str, argument: Any, cancel: CancelToken) -> Any:
        return await self._running().call(name, (argument,), cancel)

    async def _stream_in_host(self, name: str, argument: Any, cancel: CancelToken) -> AsyncGenerator[Any, None]:
        async for item in self._running().stream(name, (argument,), cancel):
            yield item

    def __getattr__(self, name: str) -> Any:
        """A request method the kind declares of its own, run in the host like the core's."""
        kind = self.__dict__.get("kind")
        method = next((m for m in kind.methods if m.name == name), None) if kind is not None else None
        if method is None:
            raise AttributeError(name)
        return forwarder(method, HostedEngine._call_in_host, HostedEngine._stream_in_host).__get__(self)


forward_core_methods(HostedEngine, HostedEngine._call_in_host, HostedEngine._stream_in_host)
