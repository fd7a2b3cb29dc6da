"""KV parking: the turn after a tier move, with the conversation parked in host memory vs prefilled again.

Run from the repo root: `python -m bench.kv_park_bench` (the Qwen2.5-Coder-0.5B starter; see bench.llama_bench).
One `hypnos serve` holds the model. Each round: a long first turn, the model moved to tier 2, then the second turn
(timed: reload + prompt + 8 tokens). Rounds alternate parking off and on (POST /v1/memory/kv-park), so background
load hits both alike. Prints the medians of the second turn's wall time and of the reload, with the ratio.
Parking goes through the prompt cache (parked states held under the park cap, restored by prefix on the turn); the
model's own prompt cache is off here, so with parking off the turn prefills again.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

MODEL = "qwen2.5:0.5b"


def _model_path(explicit: str | None) -> Path:
    from bench.llama_bench import _resolve_model

    return _resolve_model(explicit)


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--history-words", type=int, default=900, help="length of the first user message")
    args = parser.parse_args()

    import httpx
    import openai
    from hypnos_llama.testing import toml_model_config
    from hypnos_server.testing import live_server

    gguf = _model_path(args.model)
    work = Path(tempfile.mkdtemp(prefix="hypnos-kvpark-bench-"))
    config = work / "hypnos.toml"
    table = {
        "id": MODEL,
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": str(gguf),
        "slots": 2,
        "context_len": 4096,
        "initial_tier": "tier1_gpu_vram",
        "prompt_cache": {"enabled": False},  # parking alone: off prefills again
    }
    config.write_text(toml_model_config(gguf.parent, [table]))
    words = " ".join(f"item{i % 97} is filed under shelf {i % 13}." for i in range(args.history_words // 6))
    seconds: dict[bool, list[float]] = {False: [], True: []}
    reload_ms: dict[bool, list[float]] = {False: [], True: []}
    prompt_tokens = 0
    with live_server(config) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=600, max_retries=0)
        for round_index in range(args.rounds):
            for parked in (False, True):
                httpx.post(f"{base}/v1/memory/kv-park", json={"enabled": parked}, timeout=10).raise_for_status()
                story = [{"role": "user", "content": f"Round {round_index} {parked}. Remember this list: {words}"}]
                first = client.chat.completions.create(model=MODEL, messages=story, temperature=0, max_tokens=8)
                history: list[Any] = [
                    *story,
                    {"role": "assistant", "content": first.choices[0].message.content},
                    {"role": "user", "content": "Which shelf holds item5?"},
                ]
                httpx.post(
                    f"{base}/v1/memory/tier", json={"model": MODEL, "target_tier": "tier2_pinned_ram"}, timeout=120
                ).raise_for_status()
                started = time.perf_counter()
                second = client.chat.completions.create(model=MODEL, messages=history, temperature=0, max_tokens=8)
                seconds[parked].append(time.perf_counter() - started)
                phases = second.model_extra["hypnos_telemetry"].get("tier_switch_phases") or {}
                reload_ms[parked].append(float(phases.get("total_ms") or 0.0))
                prompt_tokens = second.usage.prompt_tokens
        httpx.post(f"{base}/v1/memory/kv-park", json={"enabled": False}, timeout=10)

    off, on = statistics.median(seconds[False]), statistics.median(seconds[True])
    print(f"\nsecond turn after a move to tier 2 ({prompt_tokens} prompt tokens, 8 new), {args.rounds} rounds, medians")
    print(f"{'':32} {'turn s':>8} {'reload ms':>10}")
    print(f"{'kv parking off (prefill again)':32} {off:8.3f} {statistics.median(reload_ms[False]):10.1f}")
    print(f"{'kv parking on (restored)':32} {on:8.3f} {statistics.median(reload_ms[True]):10.1f}")
    print(f"speed-up of the turn: {off / on:.2f}x")


if __name__ == "__main__":
    main()
