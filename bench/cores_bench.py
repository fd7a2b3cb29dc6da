"""CPU cores as a scheduled resource: decode beside whisper, docling and a CPU hog against the best static threads.

Run from the repo root: `python -m bench cores` (`nox -s bench -- cores`: the llama, audio and docling plugins with
their starter weights, in `.nox/bench-isolation`). The starter lineup is served by one `hypnos serve` per setting, in
turn (so the machine's background load hits each alike only roughly: run `--rounds` > 1 on a quiet machine):
- `static-N` for N = 1 .. the cores: `[hardware] share_cores = false`, `[models.llama] n_threads = N` and
  `adapt_threads = false` (today's behaviour with a fixed thread count; N = the cores is today's default);
- `scheduled`: the defaults (core shares, engine hosts pinned, llama's threads following its share and contention).
Each round measures one streamed answer's decode tokens/s (96 tokens after the first) in four situations: alone,
while whisper transcribes in a loop (same server), while docling converts a 4-page PDF in a loop (same server), and
while an outside CPU hog runs (one busy process per core, nice 0). Every situation's row compares `scheduled` with
the best static setting of that situation (target >= 0.97 alone, >= 0.9 beside the others) and shows today's
default against it. Then a realtime voice turn (one /v1/realtime turn with commit, realtime_bench's) on each
setting: p50 of `--turns` turns quiet and with a chat stream running beside it (target: <= 1.5x its quiet p50).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.llama_bench import PROMPT, _single
from bench.realtime_bench import QUESTION, Turns, lineup, model_of, trimmed

SITUATIONS = {  # name: (label, target against the best static)
    "alone": ("decode alone", 0.97),
    "whisper": ("decode while whisper transcribes", 0.9),
    "docling": ("decode while docling converts", 0.9),
    "hog": ("decode beside a CPU hog per core", 0.9),
}
PORTS = range(9151, 9160)


def settings(models: list[dict[str, Any]], threads: int | None) -> dict[str, Any]:
    """The config of one setting: static `threads` (shares and adaptation off), or None for the scheduled one."""
    chosen = []
    for model in models:
        model = dict(model)
        if threads is not None and model.get("engine") == "ggml_llama":
            model["llama"] = {**model.get("llama", {}), "n_threads": threads, "adapt_threads": False}
        chosen.append(model)
    config: dict[str, Any] = {"models": chosen}
    if threads is not None:
        config["hardware"] = {"share_cores": False}
    return config


@contextmanager
def looping(call: Callable[[], object]) -> Iterator[None]:
    """Run `call` again and again in a thread for the block's length."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            call()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    time.sleep(0.5)  # the load is running before the measurement starts
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def cpu_hog() -> Iterator[None]:
    """One busy process per core (nice 0) outside the server."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(len(os.sched_getaffinity(0)))]
    time.sleep(0.5)
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


class Setting:
    """One served setting: its loads and its figures."""

    def __init__(self, base: str, models: list[dict[str, Any]], wav: bytes) -> None:
        self.base = base
        self.http = httpx.Client(base_url=base, timeout=600)
        self.chat = model_of(models, "text_generation")
        self.stt = model_of(models, "speech_to_text")
        self.docs = optional_model(models, "document_conversion")
        self.wav, self.pdf = wav, b""
        if self.docs is not None:
            from hypnos_docling.testing import long_pdf

            self.pdf = long_pdf(4)

    def decode(self) -> float:
        """One streamed answer's decode tokens/s."""
        return asyncio.run(_single(self.base, self.chat, 96, prompt=PROMPT)).decode_tps

    def transcribe(self) -> None:
        """One transcription of the question."""
        files = {"file": ("question.wav", self.wav, "audio/wav")}
        self.http.post("/v1/audio/transcriptions", data={"model": self.stt}, files=files).raise_for_status()

    def convert(self) -> None:
        """One conversion of the 4-page PDF."""
        files = {"file": ("doc.pdf", self.pdf, "application/pdf")}
        self.http.post("/v1/documents/convert", data={"model": self.docs}, files=files).raise_for_status()

    def situation(self, name: str) -> float:
        """Decode tokens/s in one situation."""
        if name == "whisper":
            with looping(self.transcribe):
                return self.decode()
        if name == "docling":
            with looping(self.convert):
                return self.decode()
        if name == "hog":
            with cpu_hog():
                return self.decode()
        return self.decode()

    def chatting(self) -> None:
        """A long streamed answer (the chat beside a voice turn)."""
        asyncio.run(_single(self.base, self.chat, 256, prompt=PROMPT))


def optional_model(models: list[dict[str, Any]], modality: str) -> str | None:
    """The first model serving `modality`, None when no installed plugin serves it."""
    try:
        return model_of(models, modality)
    except SystemExit:
        return None


def voice_turns(setting: Setting, turns: Turns, count: int) -> tuple[float, float]:
    """p50 first-audio ms of `count` realtime turns quiet, then with a chat stream beside them."""
    quiet = [turns.realtime(True)["first_audio_ms"] for _ in range(count)]
    with looping(setting.chatting):
        beside = [turns.realtime(True)["first_audio_ms"] for _ in range(count)]
    return statistics.median(quiet), statistics.median(beside)


def main() -> None:
    """Serve each setting in turn, measure the situations and voice turns, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench cores", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the four situations per setting")
    parser.add_argument("--turns", type=int, default=5, help="voice turns per setting, quiet and beside a chat")
    parser.add_argument("--speech", default="piper-joe", help="the speech model of the voice turns")
    parser.add_argument(
        "--only", default="", help="comma-separated situations (default: all): " + ", ".join(SITUATIONS)
    )
    parser.add_argument("--settings", default="", help="comma-separated settings (default: every static-N, scheduled)")
    args = parser.parse_args()
    only = [name for name in SITUATIONS if not args.only or name in args.only.split(",")]

    from hypnos.tomlw import dumps
    from hypnos_server.testing import live_server

    cores = len(os.sched_getaffinity(0))
    names = [f"static-{n}" for n in range(1, cores + 1)] + ["scheduled"]
    names = [name for name in names if not args.settings or name in args.settings.split(",")]
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    voice: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="hypnos-cores-bench-") as scratch:
        work = Path(scratch)
        models = lineup(work)
        for index, name in enumerate(names):
            threads = None if name == "scheduled" else int(name.split("-")[1])
            config = work / f"{name}.toml"
            config.write_text(dumps({"models_dir": str(work), **settings(models, threads)}))
            with live_server(config, port=PORTS[index % len(PORTS)], ready_timeout=600) as base:
                tts = model_of(models, "text_to_speech", args.speech)
                spoken = httpx.post(
                    f"{base}/v1/audio/speech", json={"model": tts, "input": QUESTION, "response_format": "pcm"},
                    timeout=120,
                )  # fmt: skip
                spoken.raise_for_status()
                question = trimmed(spoken.content)
                turns = Turns(base, model_of(models, "text_generation"), model_of(models, "speech_to_text"), tts,
                              question, 500)  # fmt: skip
                setting = Setting(base, models, turns.wav)
                if setting.docs is None and "docling" in only:
                    print("no document model (hypnos-docling is not installed): no docling row", file=sys.stderr)
                    only.remove("docling")
                setting.decode(), setting.transcribe()  # every path once before the rounds
                if args.turns:
                    turns.realtime(True)
                if "docling" in only:
                    setting.convert()
                for round_index in range(args.rounds):
                    for situation in only:
                        value = setting.situation(situation)
                        figures[name].setdefault(situation, []).append(value)
                        print(f"round {round_index} {name:<10}{situation:<9}{value:8.2f} tok/s", file=sys.stderr)
                if args.turns:
                    voice[name] = voice_turns(setting, turns, args.turns)
                    print(f"{name:<10} voice p50 quiet {voice[name][0]:.0f} ms, beside a chat {voice[name][1]:.0f} ms",
                          file=sys.stderr)  # fmt: skip
    report(names, figures, voice, only, args.rounds, cores)


def report(
    names: list[str],
    figures: dict[str, dict[str, list[float]]],
    voice: dict[str, tuple[float, float]],
    only: list[str],
    rounds: int,
    cores: int,
) -> None:
    """The table: medians per setting, scheduled / best static, today's default / best static, the target."""
    medians = {name: {s: statistics.median(v) for s, v in by.items()} for name, by in figures.items()}
    print(f"decode tok/s, medians of {rounds} rounds per setting ({cores} cores); best = the best static setting")
    head = "".join(f"{name:>11}" for name in names)
    print(f"{'situation':<36}{head}{'sched/best':>12}{'today/best':>12}  target")
    for situation in only:
        label, target = SITUATIONS[situation]
        static = [medians[n][situation] for n in names if n != "scheduled"]
        row = "".join(f"{medians[n][situation]:>11.2f}" for n in names)
        if not static or "scheduled" not in medians:
            print(f"{label:<36}{row}")
            continue
        best = max(static)
        ratio, today = medians["scheduled"][situation] / best, static[-1] / best
        print(f"{label:<36}{row}{ratio:>12.3f}{today:>12.3f}  >= {target}")
    if voice:
        print("voice turn (realtime, commit) first audio p50 ms: quiet / beside a chat stream (target <= 1.5x)")
        for name, (quiet, beside) in voice.items():
            print(f"  {name:<11}{quiet:>8.0f}{beside:>8.0f}  {beside / quiet:.2f}x")


if __name__ == "__main__":
    main()
