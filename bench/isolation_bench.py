"""Engine isolation: every engine in its own host process against every engine in the server process (thread mode).

Run from the repo root: `python -m bench.isolation_bench` (`nox -s bench -- isolation` installs the llama, audio,
docling and gliner plugins with the starter weights into `.nox/bench-isolation`). Two `hypnos serve` run the same
lineup (`hypnos starter`'s models plus a tiny random GLiNER) at once, one with `[server] isolation = "process"`, one
with `"thread"`; each workload runs on one while the other is idle, in alternating rounds, so that background load
hits both alike. Each row is process / thread (higher is better for rates, lower for times, so every ratio printed
is "how process mode compares": >= 1 means as fast or faster):
- llama decode, 1 stream (tokens/s after the first) and its TTFT (ms added, repeated prompt);
- llama decode, 4 concurrent streams (total tokens/s);
- embeddings (texts/s, 32 texts a request); speech (seconds per sentence); transcription (seconds per clip);
- docling (pages/s on a 20-page PDF); gliner (one text, seconds);
- llama decode while 4 clients keep the torch engine (GLiNER) busy: the case one OpenMP policy cannot serve.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from bench.llama_bench import PROMPT, PROMPTS_4, _aggregate, _single

SENTENCE = "The quick brown fox jumps over the lazy dog, and then it runs back home before the rain."
ENTITY_TEXT = "Ada Lovelace worked with Charles Babbage in London on the Analytical Engine in 1843."
LABELS = ["person", "city", "machine", "date"]


def lineup(work: Path) -> list[dict[str, Any]]:
    """The starter models of every installed plugin (written by `hypnos starter`), plus the tiny GLiNER."""
    import subprocess

    from hypnos_gliner.testing import build_tiny_gliner, model_table

    out = work / "starter.toml"
    command = [sys.executable, "-m", "hypnos_server.cli", "starter", "--models-dir", str(work), "--out", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    models = tomllib.loads(out.read_text())["models"]
    build_tiny_gliner(work / "gliner-tiny", onnx=False)
    table = model_table(runtime="torch")
    models.append(table)
    for model in models:
        model["initial_tier"] = "tier1_gpu_vram"
        if serves(model, "text_generation"):
            model["slots"] = 4
    return models


def serves(model: dict[str, Any], modality: str) -> bool:
    """Whether a [[models]] table serves `modality`."""
    given = model.get("modality") or model.get("modalities") or []
    return modality == given if isinstance(given, str) else modality in given


def first_id(models: list[dict[str, Any]], modality: str, engine: str | None = None) -> str:
    """The id of the first model serving `modality` (on `engine` when given)."""
    for model in models:
        if serves(model, modality) and (engine is None or model.get("engine") == engine):
            return str(model["id"])
    raise SystemExit(f"no starter model serves {modality}: install its plugin and starter weights")


def write_config(work: Path, models: list[dict[str, Any]], isolation: str) -> Path:
    """A config for one side: the lineup with `[server] isolation`."""
    from hypnos.tomlw import dumps

    path = work / f"hypnos-{isolation}.toml"
    path.write_text(dumps({"models_dir": str(work), "server": {"isolation": isolation}, "models": models}))
    return path


class Workloads:
    """The measured calls against one server, each returning its figure."""

    def __init__(self, base: str, models: list[dict[str, Any]], pdf: bytes, wav: bytes) -> None:
        self.base = base
        self.http = httpx.Client(base_url=base, timeout=600)
        self.chat = first_id(models, "text_generation")
        self.embed = first_id(models, "embeddings")
        self.speak = first_id(models, "text_to_speech")
        self.hear = first_id(models, "speech_to_text")
        self.docs = first_id(models, "document_conversion")
        self.entities = first_id(models, "entity_extraction")
        self.pdf, self.wav = pdf, wav

    def decode(self) -> tuple[float, float]:
        """One stream of 96 tokens: decode tokens/s and TTFT ms."""
        result = asyncio.run(_single(self.base, self.chat, 96, prompt=PROMPT))
        return result.decode_tps, result.ttft_ms

    def streams(self) -> float:
        """Four concurrent streams of 64 tokens: total tokens/s."""
        return asyncio.run(_aggregate(self.base, self.chat, PROMPTS_4, 64))

    def embeddings(self) -> float:
        """Texts per second, 32 texts a request: the median of 8 requests (short ones: one sample is noise)."""
        texts = [f"{SENTENCE} Number {n}." for n in range(32)]

        def one() -> float:
            self.http.post("/v1/embeddings", json={"model": self.embed, "input": texts}).raise_for_status()
            return 0.0

        return len(texts) / median_secs(one, 8)

    def speech(self) -> float:
        """Seconds for one sentence of speech (WAV)."""
        started = time.perf_counter()
        body = {"model": self.speak, "input": SENTENCE, "response_format": "wav"}
        self.http.post("/v1/audio/speech", json=body).raise_for_status()
        return time.perf_counter() - started

    def transcription(self) -> float:
        """Seconds for one clip's transcript."""
        started = time.perf_counter()
        files = {"file": ("clip.wav", self.wav, "audio/wav")}
        self.http.post("/v1/audio/transcriptions", data={"model": self.hear}, files=files).raise_for_status()
        return time.perf_counter() - started

    def documents(self) -> float:
        """Pages per second converting the 20-page PDF."""
        started = time.perf_counter()
        files = {"file": ("long.pdf", self.pdf, "application/pdf")}
        self.http.post("/v1/documents/convert", data={"model": self.docs}, files=files).raise_for_status()
        return 20 / (time.perf_counter() - started)

    def entity(self) -> float:
        """Seconds for one text's entities: the median of 20 requests."""
        body = {"model": self.entities, "input": ENTITY_TEXT, "labels": LABELS}
        return median_secs(lambda: self.http.post("/v1/entities", json=body).raise_for_status(), 20)

    def decode_while_torch_busy(self) -> float:
        """Decode tokens/s of one stream while 4 clients keep the GLiNER (torch) engine busy."""
        stop = threading.Event()

        def hammer() -> None:
            with httpx.Client(base_url=self.base, timeout=600) as http:
                body = {"model": self.entities, "input": " ".join([ENTITY_TEXT] * 8), "labels": LABELS}
                while not stop.is_set():
                    http.post("/v1/entities", json=body)

        threads = [threading.Thread(target=hammer, daemon=True) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        try:
            return asyncio.run(_single(self.base, self.chat, 96, prompt=PROMPT)).decode_tps
        finally:
            stop.set()
            for thread in threads:
                thread.join()


def median_secs(call: Callable[[], object], times: int) -> float:
    """The median wall time of `times` calls."""
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent)


# name, what is measured, whether higher is better, the target ratio (process / thread, or TTFT ms added)
ROWS: list[tuple[str, str, bool, str]] = [
    ("decode", "llama decode 1 stream tok/s", True, ">= 0.97"),
    ("ttft", "llama TTFT ms (repeated prompt)", False, "<= +2 ms"),
    ("streams", "llama 4 streams tok/s", True, ">= 0.97"),
    ("embeddings", "embeddings texts/s (32 a request)", True, ">= 0.95"),
    ("speech", "speech s per sentence", False, ">= 0.95"),
    ("transcription", "transcription s per clip", False, ">= 0.95"),
    ("documents", "docling pages/s (20 pages)", True, ">= 0.95"),
    ("entity", "gliner s per text", False, ">= 0.95"),
    ("busy", "llama decode tok/s, GLiNER busy", True, ">= 1.5"),
]


ROWS_BY = tuple(row[0] for row in ROWS)  # the workload names --only takes


def one_round(work: Workloads, only: set[str] | None = None) -> dict[str, float]:
    """Every workload (or those in `only`) once on one server."""
    decode, ttft = work.decode() if only is None or only & {"decode", "ttft"} else (0.0, 0.0)
    calls: dict[str, Callable[[], float]] = {
        "streams": work.streams,
        "embeddings": work.embeddings,
        "speech": work.speech,
        "transcription": work.transcription,
        "documents": work.documents,
        "entity": work.entity,
        "busy": work.decode_while_torch_busy,
    }
    chosen = {name: call for name, call in calls.items() if only is None or name in only}
    return {"decode": decode, "ttft": ttft, **{name: call() for name, call in chosen.items()}}


def main() -> None:
    """Start both servers, measure in alternating rounds, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.isolation_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (each server once a round)")
    parser.add_argument("--only", default="", help="comma-separated workloads (default: all): " + ", ".join(ROWS_BY))
    args = parser.parse_args()
    only = set(args.only.split(",")) - {""} or None
    if only is not None and only - set(ROWS_BY):
        parser.error(f"unknown workloads: {', '.join(sorted(only - set(ROWS_BY)))}")

    from hypnos_docling.testing import long_pdf
    from hypnos_server.testing import live_server

    figures: dict[str, dict[str, list[float]]] = {"process": {}, "thread": {}}
    with ExitStack() as stack:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hypnos-isolation-bench-")))
        models = lineup(work_dir)
        bases = {
            mode: stack.enter_context(live_server(write_config(work_dir, models, mode), ready_timeout=600))
            for mode in figures
        }
        probe = Workloads(bases["thread"], models, long_pdf(20), b"")
        speech = probe.http.post(
            "/v1/audio/speech", json={"model": probe.speak, "input": SENTENCE, "response_format": "wav"}
        )
        speech.raise_for_status()
        works = {mode: Workloads(base, models, long_pdf(20), speech.content) for mode, base in bases.items()}
        for workload in works.values():  # warm every model on both sides before the first round
            one_round(workload, only)
        for index in range(args.rounds):
            for mode in ("process", "thread") if index % 2 == 0 else ("thread", "process"):
                for name, value in one_round(works[mode], only).items():
                    figures[mode].setdefault(name, []).append(value)
                    print(f"round {index} {mode:<8}{name:<14}{value:.4f}", file=sys.stderr)
    medians = {mode: {name: statistics.median(values) for name, values in by.items()} for mode, by in figures.items()}
    print(f"{args.rounds} alternating rounds, medians; ratio: how process mode compares (>= 1: as fast or faster)")
    print(f"{'workload':<36}{'process':>10}{'thread':>10}{'ratio':>9}  target")
    for name, label, higher, target in ROWS:
        if name not in medians["process"] or (only is not None and name not in only):
            continue
        process, thread = medians["process"][name], medians["thread"][name]
        if name == "ttft":
            shown = f"{process - thread:+.2f}ms"
        else:
            shown = f"{(process / thread if higher else thread / process):.3f}"
        print(f"{label:<36}{process:>10.3f}{thread:>10.3f}{shown:>9}  {target}")


if __name__ == "__main__":
    main()
