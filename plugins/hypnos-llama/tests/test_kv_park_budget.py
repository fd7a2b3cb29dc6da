"""Parked llama.cpp KV states (prompt cache entries held under the park cap) in the real server's books: tier 2 shows
them while the model is warm, the model's return makes them ordinary saved prompts that the next turn restores by
prefix, a tier-2 budget with no room left refuses to park, and a context the first chat grew comes back grown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from hypnos_llama.testing import make_engine, toml_model_config, write_tiny_llama
from hypnos_server.testing import live_server

ENV = {"HYPNOS_PLUGINS": "llama"}
MODEL = "tiny"
# more than a block (64 tokens): a shorter conversation is not parked, its prefill is that short
STORY = [{"role": "user", "content": "the capital of France and the tallest tower in Paris. " * 8}]


def start(tmp_path: Path, pinned_ram_budget_bytes: int, context_len: int = 2048) -> Any:
    """A live server with the tiny GGUF (2 slots of `context_len` cells; 2048 each: no request grows the context),
    KV parking on and this tier-2 budget."""
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    write_tiny_llama(models / "tiny.gguf")
    model = {
        "id": MODEL,
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": "tiny.gguf",
        "slots": 2,
        "context_len": context_len,
    }
    # bookings stay the estimates the budgets here are sized from (measured placement would book the tiny model's host
    # growth, mostly llama.cpp's own pages)
    hardware = (
        f"[hardware]\npinned_ram_budget_bytes = {pinned_ram_budget_bytes}\nmeasured_placement = false\n"
        "kv_park = { enabled = true }\n"
    )
    config = tmp_path / "hypnos.toml"
    config.write_text(toml_model_config(models, [model], extra=hardware))
    return live_server(config, env=ENV)


def chat(base: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0}
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def to_tier(base: str, tier: str) -> None:
    moved = httpx.post(f"{base}/v1/memory/tier", json={"model": MODEL, "target_tier": tier}, timeout=60)
    assert moved.status_code == 200, moved.text


def status(base: str) -> dict[str, Any]:
    return httpx.get(f"{base}/v1/memory/status", timeout=10).json()  # type: ignore[no-any-return]


def placement(base: str) -> dict[str, Any]:
    return next(m for m in status(base)["models"] if m["id"] == MODEL)["placement"]  # type: ignore[no-any-return]


def test_parked_kv_shows_in_tier2_and_the_next_turn_restores_it(tmp_path: Path) -> None:
    with start(tmp_path, 1024**3) as base:
        first = chat(base, STORY)
        to_tier(base, "tier2_pinned_ram")
        parked = status(base)
        warm = next(m for m in parked["models"] if m["id"] == MODEL)["placement"]["pinned_ram_bytes"]
        (held,) = parked["kv_park"]["models"]
        assert held["model"] == MODEL and held["bytes"] > 0 and held["tokens"] >= first["usage"]["prompt_tokens"]
        assert parked["kv_park"]["used_bytes"] == held["bytes"]
        assert parked["tier2_pinned_ram_used_bytes"] == warm + held["bytes"]
        assert parked["tier2_pinned_ram_free_bytes"] == 1024**3 - warm - held["bytes"]
        history = [*STORY, {"role": "assistant", "content": first["choices"][0]["message"]["content"]}]
        again = chat(base, [*history, {"role": "user", "content": "and in Rome?"}])
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"]
        restored = status(base)
        assert restored["kv_park"]["used_bytes"] == 0 and restored["kv_park"]["models"] == []
        assert restored["prompt_cache"]["hits"]["ram"] == 1
        # the model is in tier 1, nothing parked: what tier 2 holds is the prompt cache's (its RAM cap now)
        assert restored["tier2_pinned_ram_used_bytes"] == restored["prompt_cache"]["ram_bytes"]


def test_a_tier2_budget_without_room_refuses_to_park(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    estimate = make_engine(write_tiny_llama(models / "tiny.gguf"), slots=2, context_len=2048).estimate()
    budget = estimate.weight_bytes + estimate.projector_bytes  # the warm weights fit, not a byte more
    with start(tmp_path, budget) as base:
        chat(base, STORY)
        to_tier(base, "tier2_pinned_ram")
        warm = status(base)
        assert warm["kv_park"]["models"] == [] and warm["kv_park"]["used_bytes"] == 0
        assert warm["tier2_pinned_ram_used_bytes"] == budget == warm["capabilities"]["pinned_ram_budget_bytes"]
        assert warm["prompt_cache"]["ram_bytes"] == 0  # not in RAM either: the conversation went to the disk tier
        again = chat(base, STORY)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        assert status(base)["prompt_cache"]["hits"]["disk"] == 1


def test_a_grown_context_comes_back_grown_and_restores_its_parked_kv(tmp_path: Path) -> None:
    # 2 slots of 512 cells share 1024; the first chat asks for the 2048 floor and the engine grows the pool to 2048
    models = tmp_path / "models"
    models.mkdir()
    estimate = make_engine(write_tiny_llama(models / "tiny.gguf"), slots=2, context_len=512).estimate()
    grown_kv = estimate.kv_bytes_per_token * 2048 + estimate.workspace_bytes
    with start(tmp_path, 1024**3, context_len=512) as base:
        to_tier(base, "tier1_gpu_vram")
        assert placement(base)["allocated_context_len"] == 1024
        first = chat(base, STORY)
        assert placement(base)["allocated_context_len"] == 2048
        to_tier(base, "tier2_pinned_ram")
        (held,) = status(base)["kv_park"]["models"]
        history = [*STORY, {"role": "assistant", "content": first["choices"][0]["message"]["content"]}]
        again = chat(base, [*history, {"role": "user", "content": "and in Rome?"}])
        telemetry = again["hypnos_telemetry"]
        assert held["tokens"] >= first["usage"]["prompt_tokens"]
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"]
        assert telemetry["placement"]["allocated_context_len"] == 2048
        booked = placement(base)
        assert booked["allocated_context_len"] == 2048 and booked["vram_kv_and_workspace_bytes"] == grown_kv
        # tier 3 forgets the growth, and with it the parked conversation that only fits the grown layout
        to_tier(base, "tier3_nvme_ssd")
        assert status(base)["kv_park"]["models"] == []
        to_tier(base, "tier1_gpu_vram")
        assert placement(base)["allocated_context_len"] == 1024
