"""Silero VAD (the ONNX model faster-whisper ships) as a speech detector for the realtime server VAD.

One InferenceSession per app, shared by every session's detector (ONNX Runtime runs it from many threads); each
detector keeps its own recurrent state, its last 64 samples of context and the samples short of a window. Silero
works at 16 kHz on 512-sample windows (32 ms): the session's 20 ms frames at 24 kHz are resampled (480 -> 320
samples, linearly: the kit's resampler for frames) and a frame is judged by the newest window's speech probability,
with OpenAI's threshold on the way in and threshold - 0.15 on the way out (Silero's own hysteresis).
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np
from hypnos.engine import missing_library
from hypnos.kit.audio import pcm16_samples, resample

MODEL_RATE = 16000
WINDOW = 512  # samples per model call at 16 kHz (Silero v5 / v6)
CONTEXT = 64  # samples of the previous window the model sees before each one
STATE_SHAPE = (1, 1, 128)  # v6: `h` and `c`, each this shape
V5_STATE_SHAPE = (2, 1, 128)  # v5: one `state`, and an `sr` input
RELEASE = 0.15  # speech goes on while the probability stays above threshold - RELEASE
ASSET = "silero_vad_v6.onnx"


def silero_asset() -> Path | None:
    """The Silero model file inside the installed faster-whisper (None when faster-whisper is absent)."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / ASSET
    return path if path.is_file() else None


class SileroModel:
    """The shared InferenceSession, created on first use (off the event loop: the first frame a session feeds)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._session: Any = None
        self._lock = threading.Lock()
        self.v5 = False

    def session(self) -> Any:
        """The InferenceSession (one intra-op thread: a window is 0.2-0.4 ms of work)."""
        if self._session is None:
            with self._lock:
                if self._session is None:
                    self._session = self._create()
        return self._session

    def _create(self) -> Any:
        if importlib.util.find_spec("onnxruntime") is None:
            raise missing_library("onnxruntime", "hypnos-audio[cpu]")
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 4
        session = onnxruntime.InferenceSession(str(self.path), sess_options=options, providers=["CPUExecutionProvider"])
        self.v5 = "state" in {node.name for node in session.get_inputs()}
        return session


class SileroDetector:
    """One session's Silero: frames in, speech or not out; its recurrent state and context carried between frames."""

    def __init__(self, model: SileroModel, threshold: float, rate: int) -> None:
        self.model = model
        self.threshold = threshold
        self.rate = rate
        self.pending = np.zeros(0, dtype=np.float32)
        self.context = np.zeros(CONTEXT, dtype=np.float32)
        self.state: dict[str, np.ndarray] = {}
        self.probability = 0.0
        self.speaking = False

    def is_speech(self, frame: bytes) -> bool:
        """True when the newest complete window sounds like speech (hysteresis: see the module docstring)."""
        samples = resample(pcm16_samples(frame), self.rate, MODEL_RATE, frames=True)
        self.pending = np.concatenate([self.pending, samples])
        while self.pending.size >= WINDOW:
            window, self.pending = self.pending[:WINDOW], self.pending[WINDOW:]
            self.probability = self._run(window)
        bar = self.threshold - RELEASE if self.speaking else self.threshold
        self.speaking = self.probability >= max(bar, 0.01)
        return self.speaking

    def _run(self, window: np.ndarray) -> float:
        session = self.model.session()
        feed: dict[str, np.ndarray] = {"input": np.concatenate([self.context, window])[np.newaxis, :]}
        if self.model.v5:
            feed["state"] = self.state.get("state", np.zeros(V5_STATE_SHAPE, dtype=np.float32))
            feed["sr"] = np.array(MODEL_RATE, dtype=np.int64)
            probability, state = session.run(None, feed)
            self.state = {"state": state}
        else:
            feed["h"] = self.state.get("h", np.zeros(STATE_SHAPE, dtype=np.float32))
            feed["c"] = self.state.get("c", np.zeros(STATE_SHAPE, dtype=np.float32))
            probability, h, c = session.run(None, feed)
            self.state = {"h": h, "c": c}
        self.context = window[-CONTEXT:]
        return float(np.asarray(probability).reshape(-1)[0])


class SileroDetectors:
    """The factory the server VAD calls per session: `detectors(threshold)` -> a SileroDetector on the shared model."""

    def __init__(self, path: Path, rate: int = 24000) -> None:
        self.model = SileroModel(path)
        self.rate = rate

    def __call__(self, threshold: float) -> SileroDetector:
        """A detector with its own state for one session."""
        return SileroDetector(self.model, threshold, self.rate)
