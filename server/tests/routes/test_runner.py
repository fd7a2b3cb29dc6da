"""The inference runner every route shares: every modality leased, hang-ups cancel the work, aborted streams charged."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import wave
from typing import Any

import pytest
from hypnos.chat import ImagePart
from hypnos.engine import ChatFinished, ContentDelta, EngineKind
from hypnos.hookspecs import hookimpl
from hypnos.testing.fake_engine import FakeEngine
from hypnos.types import Modality
from litestar.testing import TestClient
from server_harness import call, running, start_leaving
from server_kit import build_app, config, error_of, wait_ready

PIXEL = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()


def wav_bytes(seconds: float = 0.1) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(b"\x00\x00" * int(16000 * seconds))
    return buffer.getvalue()


def media_chat(model: str) -> dict[str, Any]:
    audio = base64.b64encode(wav_bytes()).decode()
    content = [
        {"type": "text", "text": "what is in both"},
        {"type": "image_url", "image_url": {"url": PIXEL}},
        {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
    ]
    return {"model": model, "messages": [{"role": "user", "content": content}]}


def test_a_chat_with_an_image_and_an_audio_part_leases_both_modalities():
    app = build_app()
    records: list[Any] = []
    app.state.hypnos.observers.append(records.append)
    with TestClient(app) as client:
        wait_ready(client)
        response = client.post("/v1/chat/completions", json=media_chat("fake-chat"))
        assert response.status_code == 200, response.text
    (record,) = [r for r in records if r.path == "/v1/chat/completions"]
    assert record.modalities == ["text_generation", "vision", "speech_to_text"]


def test_a_model_that_serves_one_of_the_two_media_is_refused_naming_the_other():
    seeing = {"id": "seeing", "modality": "text_generation", "engine": "fake", "modalities": ["vision"]}
    with TestClient(build_app(config(models=[seeing]))) as client:
        wait_ready(client)
        response = client.post("/v1/chat/completions", json=media_chat("seeing"))
        assert response.status_code == 400
        assert "speech_to_text" in error_of(response)["message"]
        assert client.get("/v1/memory/status").json()["models"][0]["active_leases"] == 0


def slow_model(model_id: str, modality: str) -> dict[str, Any]:
    """A fake model whose requests take 400 steps of 50 ms (20 s) unless cancelled."""
    return {"id": model_id, "modality": modality, "engine": "fake", "fake": {"token_ms": 50, "steps": 400}}


JSON = {"content-type": "application/json"}
HANG_UPS = [
    ("embeddings", "/v1/embeddings", {"model": "slow", "input": ["one text"]}),
    ("speech_to_text", "/v1/audio/transcriptions", {"model": "slow", "audio_bytes": list(wav_bytes())}),
    ("image_generation", "/v1/images/generations", {"model": "slow", "prompt": "a cat", "size": "256x256"}),
]


@pytest.mark.parametrize(("modality", "path", "body"), HANG_UPS, ids=[h[0] for h in HANG_UPS])
async def test_a_client_that_hangs_up_cancels_the_work_and_frees_the_model(modality, path, body):
    app = build_app(config(models=[slow_model("slow", modality)]))
    records: list[Any] = []
    app.state.hypnos.observers.append(records.append)
    async with running(app):
        state = app.state.hypnos.scheduler.get("slow")
        leaving = start_leaving(app, path, json.dumps(body).encode())
        for _ in range(1000):  # the lease is taken, and the engine's work has begun (not only its model's load)
            if state.active_leases and state.engine is not None and state.engine.works_started:
                break
            await asyncio.sleep(0.01)
        assert state.active_leases == 1 and state.engine.works_started == 1
        leaving.gone.set()
        await asyncio.wait_for(leaving.task, 10)  # the uncancelled work would run 20 s
        assert state.active_leases == 0
        assert state.engine.cancelled_requests == 1
    (record,) = records
    assert record.error_type == "cancelled" and record.status == 499


async def test_a_client_that_hangs_up_on_a_speech_stream_stops_the_synthesis():
    speaker = {"id": "slow", "modality": "text_to_speech", "engine": "fake", "fake": {"token_ms": 50}}
    app = build_app(config(models=[speaker]))
    text = ". ".join(f"phrase number {i}" for i in range(400))
    body = json.dumps({"model": "slow", "input": text, "stream": True}).encode()
    async with running(app):
        leaving = start_leaving(app, "/v1/audio/speech", body)
        await asyncio.wait_for(leaving.response.first_chunk_reached.wait(), 10)
        leaving.gone.set()
        await asyncio.wait_for(leaving.task, 10)  # 400 phrases of 50 ms would run 20 s
        assert app.state.hypnos.scheduler.get("slow").active_leases == 0


async def test_tokens_of_a_stream_the_client_closes_are_charged_to_tokens_per_day():
    slow = {"id": "slow", "modality": "text_generation", "engine": "fake", "fake": {"token_ms": 50, "tokens": 200}}
    app = build_app(config(models=[slow], server={"keys": [{"key": "k", "label": "k", "tokens_per_day": 4}]}))
    records: list[Any] = []
    app.state.hypnos.observers.append(records.append)
    auth = {**JSON, "authorization": "Bearer k"}
    body = json.dumps({"model": "slow", "stream": True, "messages": [{"role": "user", "content": "hi there"}]})
    async with running(app):
        leaving = start_leaving(app, "/v1/chat/completions", body.encode(), {"authorization": "Bearer k"})
        response = leaving.response
        for _ in range(500):  # the role chunk and two words
            if response.body.count(b'"content"') >= 3:
                break
            await asyncio.sleep(0.01)
        leaving.gone.set()
        await asyncio.wait_for(leaving.task, 10)
        refused = await call(app, "GET", "/v1/models", headers=auth)
        assert refused.status == 429
        assert json.loads(refused.body)["error"]["code"] == "tokens_per_day"
    (record,) = [r for r in records if r.path == "/v1/chat/completions"]
    words = response.body.count(b'"content"') - 1
    assert record.tokens_in == 2 and words >= 2 and record.tokens_out >= words
    assert record.error_type == "cancelled"


class SeeingEngine(FakeEngine):
    """Answers with the byte sizes of the images the server handed it."""

    async def chat(self, request, cancel):  # type: ignore[no-untyped-def, override]
        sizes = [len(part.data) for part in request.media() if isinstance(part, ImagePart)]
        yield ContentDelta(" ".join(str(size) for size in sizes))
        yield ChatFinished(finish_reason="stop", prompt_tokens=1, completion_tokens=1)


class SeeingPlugin:
    @hookimpl
    def hypnos_engine_kinds(self) -> list[EngineKind]:
        return [EngineKind(name="seeing", modalities=frozenset(Modality), factory=SeeingEngine, spec_kind="ggml_llama")]


def test_remote_images_are_fetched_by_the_server_and_private_hosts_refused_unless_allowed():
    import http.server
    import threading

    picture = b"\x89PNG\r\n\x1a\n" + b"x" * 300

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(picture)))
            self.end_headers()
            self.wfile.write(picture)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/picture.png"
    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}]
    body = {"model": "eye", "messages": [{"role": "user", "content": content}]}
    eye = {"id": "eye", "modality": "text_generation", "engine": "seeing", "modalities": ["vision"]}
    try:
        for private, expected in ((False, 400), (True, 200)):
            app = build_app(config(models=[eye], limits={"allow_private_urls": private}), plugins=[SeeingPlugin()])
            with TestClient(app) as client:
                wait_ready(client)
                response = client.post("/v1/chat/completions", json=body)
                assert response.status_code == expected, response.text
                if private:
                    assert response.json()["choices"][0]["message"]["content"] == str(len(picture))
                else:
                    assert "127.0.0.1" in error_of(response)["message"]
    finally:
        server.shutdown()
