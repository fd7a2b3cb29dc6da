"""Prefill alone: a long prompt's prefill rate in the engine's time-bounded chunks against whole n_batch chunks.

`python -m bench prefill_alone` on the Qwen2.5-Coder-0.5B starter, in-process (one slot, `--context` cells, 2 threads
unless `--threads`). The same ~`--tokens`-token prompt (a new first line each time, so nothing is cached) is prefilled
with the defaults (`prefill_step_secs` 1: each chunk cut to about a second of work by the last chunk's rate, but
not below the engine's floor) and with `prefill_step_secs` 1e6 (every chunk `n_batch` tokens), alternating, `--rounds`
times. Read time-bounded / whole chunks (1x: cutting chunks for a prompt's cancellation costs no prefill rate).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

LINE = "Line {i}: the keeper wrote that the lamp was trimmed, the glass was clean and the sea was calm tonight.\n"


async def prefill_rate(gguf: Path, llama: dict[str, Any], prompt: str, context: int) -> tuple[int, float]:
    """(prompt tokens, seconds to the first token) of one request on a freshly loaded engine."""
    from hypnos_llama.testing import chat_request, collect, make_engine, tier1

    engine = make_engine(gguf, slots=1, context_len=context, llama=llama)
    await engine.load(tier1(context, 64))
    try:
        started = time.perf_counter()
        _, finished, _ = await collect(engine, chat_request(prompt, temperature=0), max_tokens=1)
        return finished.prompt_tokens, time.perf_counter() - started
    finally:
        await engine.unload()


def main() -> None:
    """Prefill the prompt both ways, alternating; print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--tokens", type=int, default=8000, help="the prompt's length, about")
    parser.add_argument("--context", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    from bench.llama_bench import _resolve_model

    gguf = _resolve_model(args.model)
    body = "".join(LINE.format(i=i) for i in range(max(1, args.tokens // 25))) + "Say OK."
    sides = {"time-bounded": {}, "whole n_batch": {"prefill_step_secs": 1e6}}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name, extra in sides.items():
            prompt = f"Round {round_}, {name}.\n{body}"
            tokens, secs = asyncio.run(prefill_rate(gguf, {"n_threads": args.threads, **extra}, prompt, args.context))
            rates[name].append(tokens / secs)
            print(f"round {round_} {name}: {tokens} tokens in {secs:.1f} s = {tokens / secs:.1f} tokens/s", flush=True)
    bounded, whole = (statistics.median(rates[name]) for name in sides)
    print(f"\n| chunks | prefill tokens/s (median of {args.rounds}) |\n|---|---|")
    print(f"| time-bounded (defaults) | {bounded:.1f} |\n| whole n_batch | {whole:.1f} |")
    print(f"time-bounded / whole: {bounded / whole:.2f}x")


if __name__ == "__main__":
    main()
