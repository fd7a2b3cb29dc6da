"""Every example of the README runs: each ```bash block that starts with curl (curl failing on an error status), and
the ```python blocks as one script, against a real `hypnos serve` whose fake models carry the README's model ids."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypnos_server import testing
from hypnos_server.testing import live_server

ROOT = Path(__file__).resolve().parents[1]
LINEUP = {
    "qwen2.5:0.5b": "text_generation",
    "all-minilm-l6-v2": "embeddings",
    "bge-reranker": "embeddings",
    "piper-joe": "text_to_speech",
    "kokoro-82m": "text_to_speech",
    "whisper-tiny.en": "speech_to_text",
    "tiny-sd": "image_generation",
}


def readme_blocks(language: str) -> list[str]:
    """The README's examples the fake lineup serves (those marked `# plugin:` run in their plugins' tests)."""
    return testing.readme_blocks(ROOT / "README.md", language)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("readme")
    config = folder / "hypnos.toml"
    config.write_text(
        "".join(f'[[models]]\nid = "{m}"\nmodality = "{kind}"\nengine = "fake"\n\n' for m, kind in LINEUP.items())
    )
    work = folder / "work"
    work.mkdir()
    with wave.open(str(work / "question.wav"), "wb") as out:  # what the realtime example sends: 1 s of a tone
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(24000)
        out.writeframes(b"".join(struct.pack("<h", 3000 if (i // 40) % 2 else -3000) for i in range(24000)))
    with live_server(config, env={"HYPNOS_PLUGINS": "fake"}) as base:
        yield base, work


def test_the_readme_has_an_example_per_modality() -> None:
    text = "\n".join(readme_blocks("bash") + readme_blocks("python"))
    for route in ("chat/completions", "embeddings", "audio/speech", "audio/transcriptions", "images/generations"):
        assert f"/v1/{route}" in text
    for call in ("responses.create", "messages.create", "realtime.connect", "/v1/rerank", '"stream": true', "tools"):
        assert call in text


def test_every_curl_example_answers(served: tuple[str, Path]) -> None:
    base, work = served
    blocks = [body for body in readme_blocks("bash") if body.startswith("curl ")]
    assert len(blocks) >= 5
    for body in blocks:
        script = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n' + body.replace(
            "localhost:9999", base
        )
        done = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{body}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert done.stdout.strip() or (work / "hello.wav").exists()


def test_the_python_examples_run_as_one_script(served: tuple[str, Path]) -> None:
    base, work = served
    script = "\n\n".join(readme_blocks("python")).replace("http://127.0.0.1:9999", base)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=work, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (work / "answer.wav").stat().st_size > 44 and (work / "lighthouse.png").read_bytes()[:4] == b"\x89PNG"
