"""The Prometheus families of spec section 16 on a registry owned by one app instance."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from hypnos.hardware import GpuSample
from hypnos.scheduler.records import SchedulerCounters
from hypnos.scheduler.status_types import MemoryStatus, ModelMemoryStatus
from hypnos.types import EngineTiming
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from hypnos_server.observability.facts import RequestFacts
from hypnos_server.observability.histogram import LATENCY_BOUNDS_MS, HistogramSet, LatencyHistogram
from hypnos_server.observability.realtime import ROUTE as REALTIME_ROUTE
from hypnos_server.observability.realtime import RealtimeMetrics
from hypnos_server.observability.workflows import WorkflowTracker

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

RATE_BOUNDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)
RTF_BOUNDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5, 10)
SECONDS_BOUNDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)

# Errors that mean the scheduler refused to admit a request (spec section 4).
ADMISSION_REJECTIONS = frozenset(
    {"model_busy", "deadline_unmeetable", "insufficient_vram_or_ram", "process_memory_cap"}
)
KEY_REJECTIONS = frozenset({"rate_limit_error", "permission_denied"})

StatusProvider = Callable[[], "MemoryStatus | None"]
CountersProvider = Callable[[], "SchedulerCounters | None"]

# name -> (help, bucket bounds): the per-modality histograms, declared whether or not a plugin serves them.
MODALITY_HISTOGRAMS: Mapping[str, tuple[str, tuple[float, ...]]] = MappingProxyType(
    {
        "hypnos_chat_ttft_ms": ("Chat time to first token (ms).", LATENCY_BOUNDS_MS),
        "hypnos_chat_decode_tokens_per_s": ("Chat decode rate (tokens/s).", RATE_BOUNDS),
        "hypnos_chat_prefill_tokens_per_s": ("Chat prefill rate (tokens/s).", RATE_BOUNDS),
        "hypnos_tts_rtf": ("Speech synthesis real-time factor (processing s per audio s).", RTF_BOUNDS),
        "hypnos_tts_ttfa_ms": ("Speech synthesis time to first audio (ms).", LATENCY_BOUNDS_MS),
        "hypnos_stt_rtf": ("Transcription real-time factor (processing s per audio s).", RTF_BOUNDS),
        "hypnos_image_jct_s": ("Image job completion time (s).", SECONDS_BOUNDS),
        "hypnos_document_ms_per_page": ("Document conversion time per page (ms).", LATENCY_BOUNDS_MS),
    }
)
SCHEDULER_COUNTERS = MappingProxyType(
    {
        "promotions": "Models promoted to tier 1 for a request.",
        "evictions": "Models demoted to make room.",
        "load_failures": "Model loads that failed.",
        "admissions_rejected": "Requests the scheduler refused (queue full, deadline, memory).",
    }
)
GPU_FIELDS = MappingProxyType(
    {
        "utilization_percent": "GPU utilization (%).",
        "temperature_celsius": "GPU temperature (C).",
        "power_watts": "GPU power draw (W).",
        "sm_clock_mhz": "GPU SM clock (MHz).",
        "throttled": "1 when the GPU reports throttling.",
        "throttle_reasons": "NVML clock throttle reason bits.",
        "ecc_uncorrected_errors": "Uncorrected ECC errors.",
        "retired_pages_pending": "1 when retired pages await a reset.",
    }
)


class LabeledCounter:
    """A monotonic counter per label-value tuple, exposed at scrape time (no `_created` series)."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> None:
        self.name = name
        self.doc = doc
        self.labels = labels
        self.values: dict[tuple[str, ...], float] = {} if labels else {(): 0.0}

    def inc(self, labels: tuple[str, ...] = (), amount: float = 1.0) -> None:
        """Add `amount` to the series with these label values."""
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        """The current value of one series (0 when never counted)."""
        return self.values.get(tuple(labels), 0.0)

    def family(self) -> CounterMetricFamily:
        """The family as prometheus_client exposes it."""
        family = CounterMetricFamily(self.name, self.doc, labels=list(self.labels))
        for values, amount in sorted(self.values.items()):
            family.add_metric(list(values), amount)
        return family


class HypnosMetrics:
    """Counters and histograms fed once per finished request, plus scrape-time gauges read from the scheduler."""

    def __init__(
        self,
        *,
        routes: HistogramSet,
        workflows: WorkflowTracker,
        status: StatusProvider | None = None,
        scheduler_counters: CountersProvider | None = None,
        started_unix: float | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.routes = routes
        self.workflows = workflows
        self.status = status
        self.scheduler_counters = scheduler_counters
        self.started_unix = time.time() if started_unix is None else started_unix
        self._started_monotonic = time.monotonic()
        self.http_requests = LabeledCounter("hypnos_http_requests", "HTTP requests by route and status class.",
                                            ("route", "class"))  # fmt: skip
        self.prefix_hits = LabeledCounter("hypnos_prefix_cache_hits", "Chat requests that reused cached tokens.")
        self.prefix_misses = LabeledCounter("hypnos_prefix_cache_misses", "Chat requests with no cached tokens.")
        self.prefix_tokens = LabeledCounter("hypnos_prefix_cache_tokens_reused", "Prompt tokens served from cache.")
        self.document_pages = LabeledCounter("hypnos_document_pages", "Document pages converted.")
        self.key_requests = LabeledCounter("hypnos_api_key_requests", "Requests per API key label.", ("key",))
        self.key_rejections = LabeledCounter("hypnos_api_key_rejections", "Requests refused by per-key limits.",
                                             ("key",))  # fmt: skip
        self.key_tokens = LabeledCounter("hypnos_api_key_tokens", "Prompt plus completion tokens per key.", ("key",))
        self.counters = [self.http_requests, self.prefix_hits, self.prefix_misses, self.prefix_tokens,
                         self.document_pages, self.key_requests, self.key_rejections, self.key_tokens]  # fmt: skip
        self.modality = {name: LatencyHistogram(bounds) for name, (_, bounds) in MODALITY_HISTOGRAMS.items()}
        self.realtime = RealtimeMetrics()
        self.derived_scheduler = dict.fromkeys(SCHEDULER_COUNTERS, 0)
        self._tokens_today: dict[str, tuple[str, int]] = {}
        self.registry.register(_ScrapeCollector(self))

    def observe(self, facts: RequestFacts) -> None:
        """Count one finished request in every family it belongs to."""
        self.http_requests.inc((facts.route, facts.status_class))
        if facts.key_label is not None:
            self._observe_key(facts)
        if facts.error_type in ADMISSION_REJECTIONS:
            self.derived_scheduler["admissions_rejected"] += 1
        if facts.tier_switch_ms:
            self.derived_scheduler["promotions"] += 1
        self.derived_scheduler["evictions"] += len(facts.evicted_models)
        if facts.route == REALTIME_ROUTE:
            self.realtime.observe(facts)
        elif facts.engine is not None:
            self._observe_engine(facts, facts.engine)
        elif facts.route.startswith("/v1/images/") and facts.status < 400:
            self.modality["hypnos_image_jct_s"].observe(facts.duration_ms / 1000.0)

    def _observe_key(self, facts: RequestFacts) -> None:
        key = facts.key_label or ""
        self.key_requests.inc((key,))
        if facts.error_type in KEY_REJECTIONS:
            self.key_rejections.inc((key,))
        tokens = (facts.tokens_in or 0) + (facts.tokens_out or 0)
        if tokens:
            self.key_tokens.inc((key,), tokens)
            today = datetime.now(UTC).date().isoformat()
            day, count = self._tokens_today.get(key, (today, 0))
            self._tokens_today[key] = (today, (count if day == today else 0) + tokens)

    def _observe_engine(self, facts: RequestFacts, engine: EngineTiming) -> None:
        route = facts.route
        if route == "/v1/chat/completions":
            self._maybe(engine.ttft_ms, "hypnos_chat_ttft_ms")
            self._maybe(engine.decode_tokens_per_s, "hypnos_chat_decode_tokens_per_s")
            self._maybe(engine.prefill_tokens_per_s, "hypnos_chat_prefill_tokens_per_s")
            cached = facts.cached_tokens if facts.cached_tokens is not None else engine.cached_tokens
            if cached is not None:
                (self.prefix_hits if cached > 0 else self.prefix_misses).inc(())
                self.prefix_tokens.inc((), cached)
        elif route == "/v1/audio/speech":
            self._maybe(engine.rtf, "hypnos_tts_rtf")
            self._maybe(engine.ttfa_ms, "hypnos_tts_ttfa_ms")
        elif route == "/v1/audio/transcriptions":
            self._maybe(engine.rtf, "hypnos_stt_rtf")
        elif route.startswith("/v1/images/"):
            self.modality["hypnos_image_jct_s"].observe(facts.duration_ms / 1000.0)
        elif route.startswith("/v1/documents/"):
            self._maybe(engine.ms_per_page, "hypnos_document_ms_per_page")
            if engine.pages:
                self.document_pages.inc((), engine.pages)

    def _maybe(self, value: float | None, family: str) -> None:
        if value is not None:
            self.modality[family].observe(value)

    def tokens_today(self) -> dict[str, int]:
        """Tokens charged today (UTC) per key label."""
        today = datetime.now(UTC).date().isoformat()
        return {key: count for key, (day, count) in self._tokens_today.items() if day == today}

    def uptime_seconds(self) -> float:
        """Seconds since the app was built."""
        return time.monotonic() - self._started_monotonic

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of this app's registry."""
        return generate_latest(self.registry)


def histogram_family(name: str, doc: str, labels: list[str], series: list[tuple[list[str], LatencyHistogram]]):
    """A HistogramMetricFamily from LatencyHistograms (one per label-value tuple)."""
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, histogram in series:
        buckets, _count, total = histogram.cumulative()
        family.add_metric(values, buckets, total)
    return family


class _ScrapeCollector(Collector):
    """Families computed at scrape time: histograms, scheduler state, per-key gauges, uptime."""

    def __init__(self, metrics: HypnosMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        m = self.metrics
        yield from (counter.family() for counter in m.counters)
        yield from self._latency(m)
        for name, (doc, _bounds) in MODALITY_HISTOGRAMS.items():
            yield histogram_family(name, doc, [], [([], m.modality[name])])
        yield from m.realtime.families()
        status: MemoryStatus | None = _call(m.status)
        models = status.models if status is not None else []
        yield from self._scheduler(m, models)
        yield from _models(models)
        yield from _memory(status)
        yield from _prompt_cache(status)
        if status is not None and isinstance(status.gpu, GpuSample):
            yield from _gpu(status.gpu)
        today = GaugeMetricFamily("hypnos_api_key_tokens_today", "Tokens charged today (UTC) per key.", labels=["key"])
        for key, count in sorted(m.tokens_today().items()):
            today.add_metric([key], count)
        yield today
        yield GaugeMetricFamily("hypnos_uptime_seconds", "Seconds since the server started.", value=m.uptime_seconds())
        yield GaugeMetricFamily("hypnos_process_start_time_seconds", "Unix time the server started.",
                                value=m.started_unix)  # fmt: skip

    def _latency(self, m: HypnosMetrics) -> Iterator[Any]:
        routes = m.routes.items()
        yield histogram_family("hypnos_request_e2e_ms", "End-to-end time per route, first byte in to last out (ms).",
                               ["route"], [([route], h) for route, h in routes])  # fmt: skip
        m.workflows.expire()
        yield histogram_family("hypnos_workflow_e2e_ms", "End-to-end time per declared workflow (ms).", ["workflow"],
                               [([name], h) for name, h in m.workflows.histograms.items()])  # fmt: skip
        total = GaugeMetricFamily("hypnos_http_request_latency_ms_sum", "Sum of request latencies per route (ms).",
                                  labels=["route"])  # fmt: skip
        largest = GaugeMetricFamily("hypnos_http_request_latency_ms_max", "Largest request latency per route (ms).",
                                    labels=["route"])  # fmt: skip
        for route, histogram in routes:
            total.add_metric([route], histogram.sum)
            largest.add_metric([route], histogram.max)
        yield total
        yield largest

    def _scheduler(self, m: HypnosMetrics, models: list[ModelMemoryStatus]) -> Iterator[Any]:
        counters: SchedulerCounters | None = _call(m.scheduler_counters)
        for name, doc in SCHEDULER_COUNTERS.items():
            value = getattr(counters, name) if counters is not None else m.derived_scheduler[name]
            yield CounterMetricFamily(f"hypnos_scheduler_{name}", doc, value=value)
        failures = CounterMetricFamily("hypnos_model_load_failures", "Failed loads per model.", labels=["model"])
        for model in models:
            failures.add_metric([model.id], model.load_failures)
        yield failures


def _call(provider: Callable[[], Any] | None) -> Any:
    """A provider's answer, or None when absent or failing."""
    if provider is None:
        return None
    try:
        return provider()
    except Exception:  # a scrape never fails because one source did
        return None


def _models(models: list[ModelMemoryStatus]) -> Iterator[Any]:
    tier = GaugeMetricFamily("hypnos_model_tier", "Current tier per model (1 GPU, 2 RAM, 3 disk).", labels=["model"])
    layers = GaugeMetricFamily("hypnos_model_gpu_layers", "Layers on the GPU per model.", labels=["model"])
    leases = GaugeMetricFamily("hypnos_model_active_leases", "Requests holding the model now.", labels=["model"])
    served = CounterMetricFamily("hypnos_model_requests", "Requests served per model.", labels=["model"])
    restarts = CounterMetricFamily(
        "hypnos_engine_restarts",
        "Engine host processes started again per model after one died (crash, hang, kill).",
        labels=["model"],
    )
    rss = GaugeMetricFamily(
        "hypnos_engine_host_rss_bytes", "Resident memory of the model's engine host.", labels=["model"]
    )
    cores = GaugeMetricFamily(
        "hypnos_model_cpu_cores", "CPU cores in the model's share now (0 while it does not compute).", labels=["model"]
    )
    threads = GaugeMetricFamily(
        "hypnos_model_threads",
        "Threads the model's engine computes with now (where it reports them).",
        labels=["model"],
    )
    for model in models:
        cores.add_metric([model.id], len(model.cores))
        if model.threads is not None:
            threads.add_metric([model.id], model.threads)
        tier.add_metric([model.id], model.current_tier.rank)
        layers.add_metric([model.id], model.placement.gpu_layers)
        leases.add_metric([model.id], model.active_leases)
        served.add_metric([model.id], model.total_requests_served)
        if model.isolation == "process":
            restarts.add_metric([model.id], model.engine_restarts)
        if model.engine_process is not None:
            rss.add_metric([model.id], model.engine_process.rss_bytes)
    yield from (tier, layers, leases, served, restarts, rss, cores, threads)


def _memory(status: MemoryStatus | None) -> Iterator[Any]:
    vram = GaugeMetricFamily("hypnos_vram_bytes", "Tier 1 memory by kind (bytes).", labels=["kind"])
    pinned = GaugeMetricFamily("hypnos_pinned_ram_bytes", "Tier 2 memory by kind (bytes).", labels=["kind"])
    if status is None:
        yield from (vram, pinned)
        return
    budgets = status.capabilities
    for kind, used in [
        ("used", status.tier1_vram_used_bytes),
        ("free", status.tier1_vram_free_bytes),
        ("real_free", status.tier1_vram_real_free_bytes),
        ("real_total", status.tier1_vram_real_total_bytes),
        ("unaccounted", status.tier1_vram_unaccounted_bytes),
        ("effective_free", status.tier1_vram_effective_free_bytes),
        ("budget", budgets.usable_vram_budget_bytes),
    ]:
        vram.add_metric([kind], used)
    for kind, used in [
        ("used", status.tier2_pinned_ram_used_bytes),
        ("free", status.tier2_pinned_ram_free_bytes),
        ("budget", budgets.pinned_ram_budget_bytes),
    ]:
        pinned.add_metric([kind], used)
    cores = GaugeMetricFamily("hypnos_cpu_cores", "CPU cores the scheduler shares out.", value=len(budgets.cpu_cores))
    yield from (vram, pinned, cores)


def _prompt_cache(status: MemoryStatus | None) -> Iterator[Any]:
    hits = CounterMetricFamily("hypnos_prompt_cache_hits", "Long chat prompts served by a saved prompt state, by tier.",
                               labels=["tier"])  # fmt: skip
    size = GaugeMetricFamily("hypnos_prompt_cache_bytes", "Saved prompt states by tier (bytes).", labels=["tier"])
    cache = status.prompt_cache if status is not None else None
    misses = cache.misses if cache is not None else 0
    for tier in ("slots", "ram", "disk"):
        hits.add_metric([tier], cache.hits.get(tier, 0) if cache is not None else 0)
    size.add_metric(["ram"], cache.ram_bytes if cache is not None else 0)
    size.add_metric(["disk"], cache.disk_bytes if cache is not None else 0)
    yield from (hits, size)
    yield CounterMetricFamily("hypnos_prompt_cache_misses", "Long chat prompts no saved state served.", value=misses)


def _gpu(gpu: GpuSample) -> Iterator[Any]:
    for field, doc in GPU_FIELDS.items():
        value = getattr(gpu, field)
        if value is not None:
            yield GaugeMetricFamily(f"hypnos_gpu_{field}", doc, value=float(value))
