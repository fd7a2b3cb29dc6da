"""Context growth: an agent's next turn that asks for a larger max_tokens than the context holds, against the same
turn at the old size.

`python -m bench context_growth` on the Qwen2.5-Coder-0.5B starter (one slot of `--context` cells). A conversation of
~`--tokens` (6k) tokens is prefilled cold (turn 1), then two next turns that each add a short question: turn 2 with
the same max_tokens (its prefix is in the slot), turn 3 with max_tokens `--grow` (past the context: the engine
rebuilds it before the turn). Both next turns prefill the same few new tokens; turn 3 also pays the rebuild, and,
when the rebuilt context does not keep the slot's cells, the whole conversation again. The answers are one line
(stop at a newline), so a large max_tokens costs no decoding. Read turn 3 / turn 2 (1x: the rebuild keeps the cells)
and cold / turn 3.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.prompt_cache_bench import MODEL, history_text, serve, stream_chat


def main() -> None:
    """Serve the starter, run the three turns, print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--tokens", type=int, default=6000, help="the conversation's length")
    parser.add_argument("--context", type=int, default=8192, help="the slot's cells at the start")
    parser.add_argument("--grow", type=int, default=16000, help="turn 3's max_tokens")
    args = parser.parse_args()

    from hypnos_llama.testing import toml_model_config

    from bench.llama_bench import _resolve_model

    gguf = _resolve_model(args.model)
    work = Path(tempfile.mkdtemp(prefix="hypnos-context-growth-bench-"))
    qwen = {"id": MODEL, "modality": "text_generation", "engine": "ggml_llama", "weights_path": str(gguf),
            "slots": 1, "context_len": args.context, "initial_tier": "tier1_gpu_vram"}  # fmt: skip
    config = work / "hypnos.toml"
    config.write_text(toml_model_config(gguf.parent, [qwen]), encoding="utf-8")
    one_line = {"stop": ["\n"]}
    with serve(config) as (base, _):
        messages = [{"role": "user", "content": history_text(1, args.tokens) + "How many notes are there?"}]
        cold, answer, _ = stream_chat(base, MODEL, messages, **one_line)
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And files?"}]
        same, answer, same_cached = stream_chat(base, MODEL, messages, **one_line)
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Which is longest?"}]
        grown, _, grown_cached = stream_chat(base, MODEL, messages, max_tokens=args.grow, **one_line)
    print(f"\n~{args.tokens}-token conversation, one slot of {args.context} cells; turn 3 asks max_tokens {args.grow}")
    print("| turn | TTFT (s) | cached tokens |\n|---|---|---|")
    print(f"| 1, cold | {cold:.2f} | 0 |")
    print(f"| 2, same context | {same:.2f} | {same_cached} |")
    print(f"| 3, the context grows | {grown:.2f} | {grown_cached} |")
    print(f"turn 3 / turn 2: {grown / same:.1f}x; cold / turn 3: {cold / grown:.1f}x")


if __name__ == "__main__":
    main()
