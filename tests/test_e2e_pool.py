"""End to end: the model pool of the real `hypnos serve` process changed while it serves, and the overlay it keeps."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import httpx
import openai
from hypnos.gguf_arch import write_tiny_gguf
from hypnos.overlay import PoolOverlay
from hypnos_server.testing import live_process, live_server

ENV = {"HYPNOS_API_KEYS": "admin-key", "HYPNOS_PLUGINS": "fake"}
AUTH = {"Authorization": "Bearer admin-key"}
CONFIG = """
models_dir = "models"

[[models]]
id = "base"
modality = "text_generation"
engine = "fake"
"""


def block(model_id: str, tokens: int, token_ms: float = 0.0) -> str:
    """A [[models]] block of a fake chat model whose weights are a tiny GGUF in models_dir."""
    return (
        f'[[models]]\nid = "{model_id}"\nmodality = "text_generation"\nengine = "fake"\n'
        f'weights_path = "tiny.gguf"\n[models.fake]\ntokens = {tokens}\ntoken_ms = {token_ms}\n'
    )


def setup(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    write_tiny_gguf(tmp_path / "models" / "tiny.gguf", "llama")
    config = tmp_path / "hypnos.toml"
    config.write_text(CONFIG)
    return config


def test_add_chat_replace_during_a_stream_remove_and_restart(tmp_path: Path) -> None:
    config = setup(tmp_path)
    with live_server(config, env=ENV) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="admin-key", max_retries=0)
        added = httpx.post(f"{base}/v1/models", json={"config": block("tiny", 4, 40.0)}, headers=AUTH)
        assert added.status_code == 201 and added.json()["persisted"] is True
        first = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert first.usage is not None and first.usage.completion_tokens == 4
        stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True)
        chunks = iter(stream)
        opening = next(chunks)  # the stream runs on the old model
        replacing: dict[str, httpx.Response] = {}
        change = threading.Thread(
            target=lambda: replacing.update(
                answer=httpx.put(
                    f"{base}/v1/models/tiny", json={"config": block("x", 2, 300.0)}, headers=AUTH, timeout=60
                )
            )
        )
        change.start()
        rest = list(chunks)
        change.join(60)
        text = (opening.choices[0].delta.content or "") + "".join(
            c.choices[0].delta.content or "" for c in rest if c.choices
        )
        assert len(text.split()) == 4 and rest[-1].choices[0].finish_reason == "stop"  # the stream finished
        assert replacing["answer"].status_code == 200 and replacing["answer"].json()["action"] == "replaced"
        after = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert after.usage is not None and after.usage.completion_tokens == 2  # served by the new model
        busy_stream = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        busy_chunks = iter(busy_stream)
        next(busy_chunks)
        refused = httpx.delete(f"{base}/v1/models/tiny?drain_secs=0", headers=AUTH)
        assert refused.status_code == 429 and refused.json()["error"]["type"] == "model_busy"
        list(busy_chunks)
        kept = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert kept.usage is not None and kept.usage.completion_tokens == 2  # drain expiry kept the model
        assert httpx.delete(f"{base}/v1/models/base", headers=AUTH).status_code == 200
        gone = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "base", "messages": [{"role": "user", "content": "hi"}]},
            headers=AUTH,
        )
        assert gone.status_code == 404 and gone.json()["error"]["type"] == "model_not_found"
    with live_server(config, env=ENV) as base:
        listed = [m["id"] for m in httpx.get(f"{base}/v1/models", headers=AUTH).json()["data"]]
        assert listed == ["tiny"]
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="admin-key", max_retries=0)
        again = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert again.usage is not None and again.usage.completion_tokens == 2


def burst(base: str, stop: threading.Event, seed: int) -> None:
    """Pool changes one after the other until the server dies."""
    rng = random.Random(seed)
    with httpx.Client(base_url=base, headers=AUTH, timeout=10) as http:
        while not stop.is_set():
            model_id = f"m{rng.randrange(4)}"
            try:
                action = rng.randrange(3)
                if action == 0:
                    http.post("/v1/models", json={"config": block(model_id, rng.randrange(1, 9))})
                elif action == 1:
                    http.put(f"/v1/models/{model_id}", json={"config": block(model_id, rng.randrange(1, 9))})
                else:
                    http.delete(f"/v1/models/{model_id}")
            except httpx.HTTPError:
                return


def test_sigkill_during_a_burst_of_pool_changes_leaves_a_readable_overlay(tmp_path: Path) -> None:
    config = setup(tmp_path)
    overlay = tmp_path / "hypnos.models.toml"
    rng = random.Random(18)
    seen: set[str] = set()
    for round_ in range(20):
        with live_process(config, env=ENV) as (process, base):
            stop = threading.Event()
            workers = [threading.Thread(target=burst, args=(base, stop, round_ * 10 + i)) for i in range(3)]
            for worker in workers:
                worker.start()
            threading.Event().wait(rng.uniform(0.05, 0.6))
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            stop.set()
            for worker in workers:
                worker.join(30)
        if overlay.exists():
            text = overlay.read_text()
            seen.add(text)
            raw = tomllib.loads(text)  # never a broken file
            read = PoolOverlay.read(overlay, ["base"])
            assert set(read.models) <= {"base", "m0", "m1", "m2", "m3"} and raw["overlay_version"] == 1
    assert len(seen) >= 5  # the bursts did change the pool between the kills
    with live_server(config, env=ENV) as base:  # and the server starts from whatever was left
        assert httpx.get(f"{base}/v1/models", headers=AUTH).status_code == 200
    assert not list(tmp_path.glob(".hypnos.models.toml.*.tmp"))  # writes cut short were cleaned at the start


def test_hypnos_advise_prints_a_config_hypnos_serve_accepts(tmp_path: Path) -> None:
    code = "import sys; from hypnos_server.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", code, "advise", "--needs", "chat,embeddings,speech", "--vram", "24G"]
    advised = subprocess.run([*command, "--ram", "64G", "--config"], capture_output=True, text=True, check=True)
    config = tmp_path / "advised.toml"
    config.write_text(advised.stdout)
    (tmp_path / "models").mkdir()
    with live_server(config, env=ENV) as base:
        listed = {m["id"] for m in httpx.get(f"{base}/v1/models", headers=AUTH).json()["data"]}
        assert listed == {"lfm3-vl:2b", "all-minilm-l6-v2", "kokoro-82m"}
