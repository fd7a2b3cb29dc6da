"""The Prometheus families of section 16 on a per-app registry, parsed with prometheus-client's own parser."""

from __future__ import annotations

from typing import Any

from hypnos.config import settings_from_mapping
from hypnos.hardware import GpuSample
from hypnos.scheduler import Scheduler
from hypnos.scheduler.records import SchedulerCounters
from hypnos.scheduler.status import MemoryStatus
from hypnos.scheduler.status_types import PromptCacheStatus
from hypnos.testing.fake_engine import fake_engine_kind
from hypnos.types import EngineTiming, MemoryTier
from hypnos_server.observability.facts import RequestFacts
from hypnos_server.observability.histogram import HistogramSet
from hypnos_server.observability.metrics import HypnosMetrics
from hypnos_server.observability.workflows import WorkflowTracker
from msgspec.structs import replace
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

SPEC_FAMILIES = {
    "hypnos_http_requests": "counter",
    "hypnos_http_request_latency_ms_sum": "gauge",
    "hypnos_http_request_latency_ms_max": "gauge",
    "hypnos_chat_ttft_ms": "histogram",
    "hypnos_chat_decode_tokens_per_s": "histogram",
    "hypnos_chat_prefill_tokens_per_s": "histogram",
    "hypnos_prefix_cache_hits": "counter",
    "hypnos_prefix_cache_misses": "counter",
    "hypnos_prefix_cache_tokens_reused": "counter",
    "hypnos_tts_rtf": "histogram",
    "hypnos_tts_ttfa_ms": "histogram",
    "hypnos_stt_rtf": "histogram",
    "hypnos_image_jct_s": "histogram",
    "hypnos_document_ms_per_page": "histogram",
    "hypnos_document_pages": "counter",
    "hypnos_scheduler_promotions": "counter",
    "hypnos_scheduler_evictions": "counter",
    "hypnos_scheduler_load_failures": "counter",
    "hypnos_scheduler_admissions_rejected": "counter",
    "hypnos_model_load_failures": "counter",
    "hypnos_model_tier": "gauge",
    "hypnos_model_gpu_layers": "gauge",
    "hypnos_model_active_leases": "gauge",
    "hypnos_model_requests": "counter",
    "hypnos_vram_bytes": "gauge",
    "hypnos_pinned_ram_bytes": "gauge",
    "hypnos_api_key_requests": "counter",
    "hypnos_api_key_rejections": "counter",
    "hypnos_api_key_tokens": "counter",
    "hypnos_api_key_tokens_today": "gauge",
    "hypnos_uptime_seconds": "gauge",
    "hypnos_process_start_time_seconds": "gauge",
    "hypnos_request_e2e_ms": "histogram",
    "hypnos_workflow_e2e_ms": "histogram",
}


def status_of(**changes: Any) -> MemoryStatus:
    """A real scheduler's typed status over two fake models ("tiny" at tier 1 with 8 GPU layers, "big" cold), with
    the top-level fields in `changes` replaced."""
    settings = settings_from_mapping(
        {
            "models": [
                {"id": "tiny", "modality": "text_generation", "engine": "fake"},
                {"id": "big", "modality": "text_generation", "engine": "fake"},
            ]
        }
    )
    status = Scheduler(settings, {"fake": fake_engine_kind()}).status()
    tiny, big = status.models
    tiny = replace(
        tiny,
        current_tier=MemoryTier.TIER1,
        placement=replace(tiny.placement, gpu_layers=8),
        active_leases=1,
        total_requests_served=12,
    )
    big = replace(big, load_failures=2)
    capabilities = replace(status.capabilities, usable_vram_budget_bytes=8_000, pinned_ram_budget_bytes=16_000)
    fields = {
        "tier1_vram_used_bytes": 3_000,
        "tier1_vram_free_bytes": 5_000,
        "tier2_pinned_ram_used_bytes": 1_000,
        "tier2_pinned_ram_free_bytes": 15_000,
        **changes,
    }
    return replace(status, models=[tiny, big], capabilities=capabilities, **fields)


def make(status: Any = None, counters: Any = None) -> HypnosMetrics:
    return HypnosMetrics(
        routes=HistogramSet(),
        workflows=WorkflowTracker(),
        status=(lambda: status) if status is not None else None,
        scheduler_counters=(lambda: counters) if counters is not None else None,
        started_unix=1_700_000_000.0,
    )


def scrape(metrics: HypnosMetrics) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(metrics.render().decode())}


def value(families: dict[str, Any], sample_name: str, **labels: str) -> float:
    family_name = sample_name.removesuffix("_total")
    for family in families.values():
        for sample in family.samples:
            if sample.name == sample_name and sample.labels == labels:
                return sample.value
    raise AssertionError(f"no sample {sample_name}{labels} in {family_name}")


def facts(**overrides: Any) -> RequestFacts:
    fields: dict[str, Any] = {
        "id": "req-1",
        "route": "/v1/models",
        "method": "GET",
        "status": 200,
        "started_unix": 1_700_000_000.0,
        "duration_ms": 3.0,
    }
    fields.update(overrides)
    return RequestFacts(**fields)


def test_every_spec_family_is_declared_before_any_request() -> None:
    families = scrape(make())
    for name, kind in SPEC_FAMILIES.items():
        assert name in families, name
        assert families[name].type == kind, name
    assert not any(name.startswith("hypnos_gpu_") for name in families)
    assert value(families, "hypnos_chat_ttft_ms_count") == 0
    assert value(families, "hypnos_process_start_time_seconds") == 1_700_000_000.0


def test_registry_is_per_instance_not_global() -> None:
    first, second = make(), make()
    first.observe(facts())
    assert first.registry is not second.registry
    assert "hypnos_http_requests" not in {m.name for m in REGISTRY.collect()}
    assert value(scrape(first), "hypnos_http_requests_total", route="/v1/models", **{"class": "2xx"}) == 1
    assert scrape(second)["hypnos_http_requests"].samples == []


def test_requests_by_route_and_class_and_latency() -> None:
    metrics = make()
    for status, duration in ((200, 3.0), (404, 7.0), (503, 1.0)):
        fact = facts(route="/v1/chat/completions", status=status, duration_ms=duration)
        metrics.routes.observe(fact.route, fact.duration_ms)
        metrics.observe(fact)
    families = scrape(metrics)
    route = "/v1/chat/completions"
    for cls in ("2xx", "4xx", "5xx"):
        assert value(families, "hypnos_http_requests_total", route=route, **{"class": cls}) == 1
    assert value(families, "hypnos_http_request_latency_ms_sum", route=route) == 11.0
    assert value(families, "hypnos_http_request_latency_ms_max", route=route) == 7.0
    assert value(families, "hypnos_request_e2e_ms_count", route=route) == 3
    assert value(families, "hypnos_request_e2e_ms_bucket", route=route, le="5.0") == 2


def test_chat_engine_timings_and_prefix_cache() -> None:
    metrics = make()
    engine = EngineTiming(ttft_ms=40.0, decode_tokens_per_s=150.0, prefill_tokens_per_s=900.0, cached_tokens=0)
    metrics.observe(facts(route="/v1/chat/completions", engine=engine))
    metrics.observe(facts(route="/v1/chat/completions", engine=engine, cached_tokens=30))
    families = scrape(metrics)
    assert value(families, "hypnos_chat_ttft_ms_count") == 2
    assert value(families, "hypnos_chat_ttft_ms_bucket", le="50.0") == 2
    assert value(families, "hypnos_chat_decode_tokens_per_s_sum") == 300.0
    assert value(families, "hypnos_chat_prefill_tokens_per_s_count") == 2
    assert value(families, "hypnos_prefix_cache_hits_total") == 1
    assert value(families, "hypnos_prefix_cache_misses_total") == 1
    assert value(families, "hypnos_prefix_cache_tokens_reused_total") == 30


def test_audio_image_and_document_families() -> None:
    metrics = make()
    metrics.observe(facts(route="/v1/audio/speech", engine=EngineTiming(rtf=0.2, ttfa_ms=120.0)))
    metrics.observe(facts(route="/v1/audio/transcriptions", engine=EngineTiming(rtf=0.05)))
    metrics.observe(facts(route="/v1/images/generations", duration_ms=1500.0, engine=EngineTiming()))
    metrics.observe(facts(route="/v1/documents/convert", engine=EngineTiming(pages=3, ms_per_page=80.0)))
    families = scrape(metrics)
    assert value(families, "hypnos_tts_rtf_count") == 1
    assert value(families, "hypnos_tts_ttfa_ms_sum") == 120.0
    assert value(families, "hypnos_stt_rtf_sum") == 0.05
    assert value(families, "hypnos_image_jct_s_sum") == 1.5
    assert value(families, "hypnos_document_ms_per_page_count") == 1
    assert value(families, "hypnos_document_pages_total") == 3


def test_api_key_families() -> None:
    metrics = make()
    metrics.observe(facts(key_label="alice", tokens_in=5, tokens_out=7))
    metrics.observe(facts(key_label="alice", status=429, error_type="rate_limit_error"))
    metrics.observe(facts(key_label="bob", status=403, error_type="permission_denied"))
    metrics.observe(facts(key_label=None, status=401, error_type="invalid_request_error"))
    families = scrape(metrics)
    assert value(families, "hypnos_api_key_requests_total", key="alice") == 2
    assert value(families, "hypnos_api_key_rejections_total", key="alice") == 1
    assert value(families, "hypnos_api_key_rejections_total", key="bob") == 1
    assert value(families, "hypnos_api_key_tokens_total", key="alice") == 12
    assert value(families, "hypnos_api_key_tokens_today", key="alice") == 12
    assert {s.labels["key"] for s in families["hypnos_api_key_requests"].samples} == {"alice", "bob"}


def test_scheduler_state_is_read_at_scrape_time() -> None:
    current = [status_of()]
    metrics = HypnosMetrics(
        routes=HistogramSet(),
        workflows=WorkflowTracker(),
        status=lambda: current[0],
        scheduler_counters=lambda: SchedulerCounters(promotions=4, evictions=2, load_failures=2, admissions_rejected=1),
    )
    families = scrape(metrics)
    assert value(families, "hypnos_model_tier", model="tiny") == 1
    assert value(families, "hypnos_model_tier", model="big") == 3
    assert value(families, "hypnos_model_gpu_layers", model="tiny") == 8
    assert value(families, "hypnos_model_active_leases", model="tiny") == 1
    assert value(families, "hypnos_model_requests_total", model="tiny") == 12
    assert value(families, "hypnos_model_load_failures_total", model="big") == 2
    assert value(families, "hypnos_scheduler_promotions_total") == 4
    assert value(families, "hypnos_scheduler_admissions_rejected_total") == 1
    assert value(families, "hypnos_vram_bytes", kind="used") == 3_000
    assert value(families, "hypnos_vram_bytes", kind="budget") == 8_000
    assert value(families, "hypnos_pinned_ram_bytes", kind="free") == 15_000
    tiny = current[0].models[0]
    current[0] = replace(current[0], models=[replace(tiny, current_tier=MemoryTier.TIER2, active_leases=0)])
    families = scrape(metrics)
    assert value(families, "hypnos_model_tier", model="tiny") == 2
    assert value(families, "hypnos_model_active_leases", model="tiny") == 0


def test_core_shares_and_threads_per_model() -> None:
    status = status_of()
    tiny, big = status.models
    status = replace(
        status,
        models=[replace(tiny, cores=[0, 1], threads=1), big],
        capabilities=replace(status.capabilities, cpu_cores=[0, 1, 2]),
    )
    families = scrape(make(status=status))
    assert value(families, "hypnos_model_cpu_cores", model="tiny") == 2
    assert value(families, "hypnos_model_cpu_cores", model="big") == 0
    assert value(families, "hypnos_model_threads", model="tiny") == 1
    assert {s.labels["model"] for s in families["hypnos_model_threads"].samples} == {"tiny"}  # big never reported
    assert value(families, "hypnos_cpu_cores") == 3


def test_derived_scheduler_counters_without_a_provider() -> None:
    metrics = make()
    metrics.observe(facts(route="/v1/chat/completions", tier_switch_ms=120.0, evicted_models=["a", "b"]))
    metrics.observe(facts(route="/v1/chat/completions", status=429, error_type="model_busy"))
    families = scrape(metrics)
    assert value(families, "hypnos_scheduler_promotions_total") == 1
    assert value(families, "hypnos_scheduler_evictions_total") == 2
    assert value(families, "hypnos_scheduler_admissions_rejected_total") == 1


def test_gpu_families_appear_with_a_gpu() -> None:
    gpu = GpuSample(utilization_percent=87, temperature_celsius=71, power_watts=148.2, throttled=False)
    families = scrape(make(status=status_of(gpu=gpu)))
    assert value(families, "hypnos_gpu_utilization_percent") == 87
    assert value(families, "hypnos_gpu_power_watts") == 148.2
    assert value(families, "hypnos_gpu_throttled") == 0


def test_a_failing_status_provider_does_not_break_the_scrape() -> None:
    def broken() -> dict:
        raise RuntimeError("nvml went away")

    metrics = HypnosMetrics(routes=HistogramSet(), workflows=WorkflowTracker(), status=broken)
    families = scrape(metrics)
    assert families["hypnos_model_tier"].samples == []
    assert "hypnos_uptime_seconds" in families


def test_workflow_histogram() -> None:
    metrics = make()
    metrics.workflows.record("voice/1", 1000.0, 1001.0, end=True)
    families = scrape(metrics)
    assert value(families, "hypnos_workflow_e2e_ms_count", workflow="voice") == 1
    assert value(families, "hypnos_workflow_e2e_ms_sum", workflow="voice") == 1000.0


def test_prompt_cache_families_by_tier() -> None:
    cache = PromptCacheStatus(ram_bytes=4096, disk_bytes=9000, hits={"slots": 5, "ram": 3, "disk": 1}, misses=2)
    families = scrape(make(status_of(prompt_cache=cache)))
    assert value(families, "hypnos_prompt_cache_hits_total", tier="ram") == 3
    assert value(families, "hypnos_prompt_cache_hits_total", tier="disk") == 1
    assert value(families, "hypnos_prompt_cache_hits_total", tier="slots") == 5
    assert value(families, "hypnos_prompt_cache_misses_total") == 2
    assert value(families, "hypnos_prompt_cache_bytes", tier="ram") == 4096
    assert value(families, "hypnos_prompt_cache_bytes", tier="disk") == 9000
