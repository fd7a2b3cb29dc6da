"""A spoken question's time to the first audio of its answer: one /v1/realtime turn against the three HTTP calls.

Run from the repo root: `python -m bench.realtime_bench` (`nox -s bench -- realtime`: hypnos-llama and hypnos-audio
with their starter weights). One `hypnos serve` holds the starter lineup (`hypnos starter`'s models); the question
is spoken once by the starter's Piper voice (its trailing near-silence cut off: the last frame is the end of the speech)
and every turn sends the same audio, alternating round by round:
- realtime, server VAD: the question streamed at real-time pace in 20 ms appends, then silence at the same pace until
  the first response.audio.delta; the time from the last frame of speech sent to that delta (the VAD's hangover,
  `silence_duration_ms`, included).
- realtime, commit: the question streamed the same way, then input_audio_buffer.commit and response.create at once;
  the time from the last frame sent to the first audio delta.
- three HTTP calls (today's way): POST /v1/audio/transcriptions, the streamed chat, then /v1/audio/speech of the whole
  answer (streamed); the time from sending the transcription to the speech's first audio bytes.
p50 and p95 over the turns of each way, the ratio against the HTTP calls (target p50 <= 1.0 s and >= 2x faster), and
the per-stage split of the realtime turns from their request-log records (stages_ms): VAD hangover (the speech_stopped
event's arrival after the last frame), transcription, the chat's first phrase, the speech of the first phrase.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx

RATE = 24000
FRAME_BYTES = RATE * 2 * 20 // 1000  # 20 ms of pcm16
QUESTION = "How do plants make food?"  # the starter chat answers it in three sentences (51 tokens)
INSTRUCTIONS = "You are a voice assistant. Answer in two or three short sentences."
WAYS = ("realtime_vad", "realtime_commit", "http")


def lineup(work: Path) -> list[dict[str, Any]]:
    """The starter models of every installed plugin (written by `hypnos starter`), all in tier 1."""
    out = work / "starter.toml"
    command = [sys.executable, "-m", "hypnos_server.cli", "starter", "--models-dir", str(work), "--out", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    models = tomllib.loads(out.read_text())["models"]
    for model in models:
        model["initial_tier"] = "tier1_gpu_vram"
    return models


def model_of(models: list[dict[str, Any]], modality: str, prefer: str | None = None) -> str:
    """The id of `prefer` when the lineup has it, else the first model serving `modality`."""
    ids = [str(m["id"]) for m in models if m.get("modality") == modality or modality in (m.get("modalities") or [])]
    if not ids:
        raise SystemExit(f"no starter model serves {modality}: install its plugin and starter weights")
    return prefer if prefer in ids else ids[0]


class Turns:
    """The three ways of one spoken turn against a served lineup, each returning its figures."""

    def __init__(self, base: str, chat: str, stt: str, tts: str, question: bytes, silence_ms: int) -> None:
        self.base, self.chat, self.stt, self.tts = base, chat, stt, tts
        self.question = question
        self.silence_ms = silence_ms
        self.http = httpx.Client(base_url=base, timeout=120)
        self.wav = wav_of(question)

    def realtime(self, commit: bool) -> dict[str, float]:
        """One turn over a fresh session: the question at real-time pace, then VAD silence or a commit."""
        from websockets.sync.client import connect

        url = self.base.replace("http://", "ws://") + f"/v1/realtime?model={self.chat}"
        with connect(url, max_size=None) as ws:
            receive_until(ws, "session.created")
            session = {
                "instructions": INSTRUCTIONS,
                "temperature": 0,  # the same answer every turn and on both ways
                "turn_detection": None if commit else {"type": "server_vad", "silence_duration_ms": self.silence_ms},
                "hypnos": {"transcription_model": self.stt, "speech_model": self.tts},
            }
            ws.send(json.dumps({"type": "session.update", "session": session}))
            receive_until(ws, "session.updated")
            last_frame = stream(ws, self.question)
            figures: dict[str, float] = {}
            if commit:
                ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
                ws.send(json.dumps({"type": "response.create"}))
                first = receive_until(ws, "response.audio.delta")[1]
            else:
                first, stopped = silence_until_audio(ws, last_frame)
                figures["vad_hangover_ms"] = (stopped - last_frame) * 1000
            figures["first_audio_ms"] = (first - last_frame) * 1000
            receive_until(ws, "response.done")
        record = self.http.get("/v1/logs", params={"route": "/v1/realtime", "limit": 1}).json()["records"][0]
        figures.update(record.get("stages_ms") or {})
        return figures

    def three_calls(self) -> dict[str, float]:
        """Transcription, streamed chat, streamed speech of the whole answer: time to the first audio bytes."""
        started = time.perf_counter()
        heard = self.http.post(
            "/v1/audio/transcriptions",
            files={"file": ("question.wav", self.wav, "audio/wav")},
            data={"model": self.stt},
        )
        heard.raise_for_status()
        transcribed = time.perf_counter()
        messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": heard.json()["text"]}]
        answer = []
        body = {"model": self.chat, "messages": messages, "stream": True, "temperature": 0}
        with self.http.stream("POST", "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if line.startswith("data: ") and line[6:].strip() != "[DONE]":
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    answer.append((choices[0].get("delta") or {}).get("content") or "")
        answered = time.perf_counter()
        speech = {"model": self.tts, "input": "".join(answer), "response_format": "pcm", "stream": True}
        first = None
        with self.http.stream("POST", "/v1/audio/speech", json=speech) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                if chunk and first is None:
                    first = time.perf_counter()
        assert first is not None, "the speech had no audio"
        return {
            "first_audio_ms": (first - started) * 1000,
            "transcription_ms": (transcribed - started) * 1000,
            "chat_ms": (answered - transcribed) * 1000,
            "speech_first_audio_ms": (first - answered) * 1000,
        }


def trimmed(pcm: bytes, floor_dbfs: float = -45.0) -> bytes:
    """The speech without its trailing near-silence (20 ms frames below `floor_dbfs`): its last frame is the end of
    the speech, so that the server VAD's whole hangover is inside the measured time."""
    import numpy as np

    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768.0
    frame = FRAME_BYTES // 2
    end = len(samples) // frame * frame
    while end > frame and 20 * np.log10(np.sqrt(np.mean(samples[end - frame : end] ** 2)) + 1e-12) < floor_dbfs:
        end -= frame
    return pcm[: end * 2]


def wav_of(pcm: bytes) -> bytes:
    """pcm16 24 kHz mono as a WAV file."""
    from hypnos.kit.audio import wav_bytes

    return wav_bytes(pcm, RATE)


def receive_until(ws: Any, kind: str) -> tuple[dict[str, Any], float]:
    """Read events until one of type `kind` (an error event ends the bench): it and when it arrived."""
    while True:
        event = json.loads(ws.recv())
        if event["type"] == "error":
            raise SystemExit(f"the server refused the turn: {event['error']}")
        if event["type"] == kind:
            return event, time.perf_counter()


def stream(ws: Any, pcm: bytes) -> float:
    """Send `pcm` in 20 ms appends at real-time pace; when the last one went out."""
    began = time.perf_counter()
    sent_at = began
    for index, offset in enumerate(range(0, len(pcm), FRAME_BYTES)):
        due = began + index * 0.02
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        frame = base64.b64encode(pcm[offset : offset + FRAME_BYTES]).decode()
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": frame}))
        sent_at = time.perf_counter()
    return sent_at


def silence_until_audio(ws: Any, last_frame: float) -> tuple[float, float]:
    """Send 20 ms of silence at real-time pace until the first audio delta: its arrival, and speech_stopped's."""
    silence = base64.b64encode(bytes(FRAME_BYTES)).decode()
    stopped = None
    index = 1
    while True:
        due = last_frame + index * 0.02
        while (wait := due - time.perf_counter()) > 0:
            try:
                event = json.loads(ws.recv(timeout=wait))
            except TimeoutError:
                break
            now = time.perf_counter()
            if event["type"] == "error":
                raise SystemExit(f"the server refused the turn: {event['error']}")
            if event["type"] == "input_audio_buffer.speech_stopped" and stopped is None:
                stopped = now
            if event["type"] == "response.audio.delta":
                return now, stopped if stopped is not None else now
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": silence}))
        index += 1


def percentile(values: list[float], quantile: float) -> float:
    """The nearest-rank quantile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(quantile * len(ordered) + 0.5) - 1))]


def main() -> None:
    """Serve the starter lineup, run the turns in alternating rounds, print p50/p95, ratios and the stage split."""
    parser = argparse.ArgumentParser(prog="python -m bench.realtime_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="turns per way")
    parser.add_argument("--speech", default="piper-joe", help="the speech model (default: the English Piper voice)")
    parser.add_argument("--silence-ms", type=int, default=500, help="server VAD silence_duration_ms")
    parser.add_argument("--question", default=QUESTION, help="what Piper says as the question")
    args = parser.parse_args()

    from hypnos.tomlw import dumps
    from hypnos_server.testing import live_server

    figures: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="hypnos-realtime-bench-") as scratch:
        work = Path(scratch)
        models = lineup(work)
        config = work / "hypnos.toml"
        config.write_text(dumps({"models_dir": str(work), "models": models}))
        chat = model_of(models, "text_generation")
        stt = model_of(models, "speech_to_text")
        tts = model_of(models, "text_to_speech", args.speech)
        with live_server(config, ready_timeout=600) as base:
            spoken = httpx.post(
                f"{base}/v1/audio/speech",
                json={"model": tts, "input": args.question, "response_format": "pcm"},
                timeout=120,
            )
            spoken.raise_for_status()
            question = trimmed(spoken.content)
            turns = Turns(base, chat, stt, tts, question, args.silence_ms)
            run = {"realtime_vad": lambda: turns.realtime(False), "realtime_commit": lambda: turns.realtime(True),
                   "http": turns.three_calls}  # fmt: skip
            for way in WAYS:  # warm every path once
                run[way]()
            for index in range(args.turns):
                order = WAYS if index % 2 == 0 else tuple(reversed(WAYS))
                for way in order:
                    result = run[way]()
                    figures[way].append(result)
                    split = " ".join(
                        f"{k.removesuffix('_ms')}={v:.0f}" for k, v in result.items() if k != "first_audio_ms"
                    )
                    print(f"turn {index} {way:<16}{result['first_audio_ms']:6.0f} ms  {split}", file=sys.stderr)
    report(args, chat, stt, tts, len(question) / 2 / RATE, figures)


def report(
    args: argparse.Namespace, chat: str, stt: str, tts: str, seconds: float, figures: dict[str, list[dict[str, float]]]
) -> None:
    """The p50/p95 table with ratios against the HTTP calls, and the median stage split of each way."""
    one, five, fifteen = os.getloadavg()
    print(f"{args.turns} turns per way, alternating; {chat} + {stt} + {tts}; question {seconds:.2f} s of Piper audio")
    print(f"load {one:.1f} / {five:.1f} / {fifteen:.1f}, {os.cpu_count()} CPUs")
    print(f"{'way':<18}{'p50 ms':>9}{'p95 ms':>9}{'http p50 / p50':>16}")
    http = statistics.median(turn["first_audio_ms"] for turn in figures["http"])
    for way, turns in figures.items():
        values = [turn["first_audio_ms"] for turn in turns]
        p50 = statistics.median(values)
        print(f"{way:<18}{p50:>9.0f}{percentile(values, 0.95):>9.0f}{http / p50:>15.2f}x")
    print("\nmedian stage split (ms)")
    stages = (
        "vad_hangover_ms", "transcription_ms", "transcription_wait_ms", "chat_first_token_ms", "chat_first_phrase_ms",
        "chat_ms", "speech_first_audio_ms", "end_of_speech_to_first_audio_ms",
    )  # fmt: skip
    print(f"{'stage':<34}" + "".join(f"{way:>18}" for way in figures))
    for stage in stages:
        cells = []
        for turns in figures.values():
            values = [turn[stage] for turn in turns if stage in turn]
            cells.append(f"{statistics.median(values):>18.0f}" if values else f"{'-':>18}")
        print(f"{stage:<34}" + "".join(cells))


if __name__ == "__main__":
    main()
