"""GET /v1/realtime: a session, a turn through transcription, chat and speech, tools, cancel and barge-in."""

from __future__ import annotations

import base64
import dataclasses
import time
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np
from hypnos.engine import AudioChunk, CancelToken, EngineKind, SpeechInput
from hypnos.hookspecs import hookimpl
from hypnos.kit.audio import pcm16_samples, to_pcm16
from hypnos.testing.fake_engine import FakeEngine, fake_engine_kind
from litestar.testing import TestClient
from realtime_kit import append, leases, realtime_app, realtime_config, tone, types, until
from server_kit import build_app, wait_ready

NO_VAD = {"type": "session.update", "session": {"turn_detection": None}}


def _connect(client: TestClient[Any], model: str = "chat") -> Any:
    return client.websocket_connect(f"/v1/realtime?model={model}")


def test_session_created_names_the_default_models_and_update_changes_them() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            created = ws.receive_json()
            assert created["type"] == "session.created"
            session = created["session"]
            assert session["model"] == "chat"
            assert session["hypnos"] == {
                "transcription_model": "stt",
                "speech_model": "tts",
                "speech_detector": "energy",
            }
            assert session["turn_detection"]["type"] == "server_vad"
            assert session["input_audio_format"] == "pcm16"
            ws.send_json(
                {
                    "type": "session.update",
                    "session": {
                        "instructions": "Be brief.",
                        "voice": "nova",
                        "turn_detection": {"type": "server_vad", "threshold": 0.7, "silence_duration_ms": 300},
                        "input_audio_transcription": {"model": "whisper-1"},
                    },
                }
            )
            updated = ws.receive_json()
            assert updated["type"] == "session.updated"
            assert updated["session"]["instructions"] == "Be brief."
            assert updated["session"]["voice"] == "nova"
            assert updated["session"]["turn_detection"]["threshold"] == 0.7
            assert updated["session"]["turn_detection"]["silence_duration_ms"] == 300
            assert updated["session"]["input_audio_transcription"] == {"model": "stt"}  # whisper-1: the pool's default


def test_a_committed_buffer_is_transcribed_answered_in_text_and_spoken() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json(NO_VAD)
            ws.receive_json()
            append(ws, tone(500))
            ws.send_json({"type": "input_audio_buffer.commit"})
            ws.send_json({"type": "response.create"})
            done, events = until(ws, "response.done")
            kinds = types(events)
            assert kinds[0] == "input_audio_buffer.committed"
            transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
            assert transcript["transcript"] == "fake transcript of 24044 bytes"  # 500 ms of pcm16 in a WAV
            assert kinds.index("conversation.item.input_audio_transcription.completed") < kinds.index(
                "response.audio_transcript.delta"
            )
            text = "".join(e["delta"] for e in events if e["type"] == "response.audio_transcript.delta")
            assert len(text.split()) == 8  # the fake chat's eight words
            audio = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.audio.delta")
            assert len(audio) == 24000 * 2 * 8 // 10  # the fake voice: 0.1 s per word, pcm16 24 kHz
            response = done["response"]
            assert response["status"] == "completed"
            assert response["usage"]["output_tokens"] == 8
            assert response["usage"]["total_tokens"] == response["usage"]["input_tokens"] + 8
            assert response["output"][0]["content"][0]["transcript"] == text
        assert set(leases(client).values()) == {0}


class NarrowbandVoice(FakeEngine):
    """A voice speaking at 16 kHz (as Piper's low-quality voices do): a 440 Hz tone, 0.1 s per word."""

    async def speak(self, speech: SpeechInput, cancel: CancelToken) -> AsyncGenerator[AudioChunk, None]:
        for _ in speech.text.split():
            yield AudioChunk(
                pcm16=to_pcm16(0.25 * np.sin(2 * np.pi * 440 * np.arange(1600) / 16000)), sample_rate=16000
            )


class NarrowbandPlugin:
    """Registers the `narrowband` engine kind."""

    @hookimpl
    def hypnos_engine_kinds(self) -> list[EngineKind]:
        """The narrowband voice."""
        return [dataclasses.replace(fake_engine_kind("narrowband"), factory=NarrowbandVoice)]


def test_speech_at_another_rate_reaches_the_session_at_24_khz() -> None:
    raw = realtime_config()
    raw["models"][2]["engine"] = "narrowband"
    with TestClient(build_app(raw, [NarrowbandPlugin()])) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello there"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            ws.send_json({"type": "response.create"})
            _, events = until(ws, "response.done")
            audio = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.audio.delta")
    samples = pcm16_samples(audio)
    assert samples.size == 24000 * 8 // 10  # eight words of 0.1 s, now at 24 kHz
    crossings = np.count_nonzero(np.diff(np.signbit(samples[:2400])))
    assert 80 <= crossings <= 96  # still 440 Hz: 88 sign changes in 0.1 s


def test_text_only_response_and_a_text_item() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json({"type": "session.update", "session": {"modalities": ["text"], "turn_detection": None}})
            ws.receive_json()
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello there"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            created, _ = until(ws, "conversation.item.created")
            assert created["item"]["content"] == [{"type": "input_text", "text": "hello there"}]
            ws.send_json({"type": "response.create"})
            done, events = until(ws, "response.done")
            assert "response.audio.delta" not in types(events)
            text = "".join(e["delta"] for e in events if e["type"] == "response.text.delta")
            assert text and next(e for e in events if e["type"] == "response.text.done")["text"] == text
            assert done["response"]["status"] == "completed"


def test_function_call_round_trip() -> None:
    tool = {"type": "function", "name": "lookup", "description": "Look up", "parameters": {"type": "object"}}
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json({"type": "session.update", "session": {"tools": [tool], "turn_detection": None}})
            ws.receive_json()
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather in Oslo"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            ws.send_json({"type": "response.create"})
            done, events = until(ws, "response.done")
            arguments = next(e for e in events if e["type"] == "response.function_call_arguments.done")
            assert arguments["name"] == "lookup"
            assert arguments["arguments"] == '{"query":"weather in Oslo"}'
            assert done["response"]["output"][0]["type"] == "function_call"
            output = {"type": "function_call_output", "call_id": arguments["call_id"], "output": '{"temp": 3}'}
            ws.send_json({"type": "conversation.item.create", "item": output})
            until(ws, "conversation.item.created")
            ws.send_json({"type": "response.create"})
            done, events = until(ws, "response.done")
            assert done["response"]["status"] == "completed"
            assert "response.function_call_arguments.done" not in types(events)  # the tool's result came last
            assert any(e["type"] == "response.audio_transcript.delta" for e in events)


def test_server_vad_commits_and_answers_a_spoken_turn() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            append(ws, tone(200, 0) + tone(400) + tone(700, 0))  # silence, speech, then more than 500 ms silence
            started, _ = until(ws, "input_audio_buffer.speech_started")
            assert 0 <= started["audio_start_ms"] <= 200
            stopped, _ = until(ws, "input_audio_buffer.speech_stopped")
            assert stopped["item_id"] == started["item_id"]
            assert 600 <= stopped["audio_end_ms"] <= 1300
            committed, _ = until(ws, "input_audio_buffer.committed")
            assert committed["item_id"] == started["item_id"]
            done, events = until(ws, "response.done")
            assert "response.created" in types(events)
            assert done["response"]["status"] == "completed"


def _tier(client: TestClient[Any], model: str) -> str:
    return next(m for m in client.get("/v1/memory/status").json()["models"] if m["id"] == model)["current_tier"]


def test_speech_started_loads_the_transcription_model_while_the_user_speaks() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        assert _tier(client, "stt") != "tier1_gpu_vram"
        with _connect(client) as ws:
            ws.receive_json()
            append(ws, tone(300))  # speech, no end of turn yet
            until(ws, "input_audio_buffer.speech_started")
            for _ in range(300):
                if _tier(client, "stt") == "tier1_gpu_vram":
                    break
                time.sleep(0.01)
            assert _tier(client, "stt") == "tier1_gpu_vram"


def _wait_free(client: TestClient[Any]) -> dict[str, int]:
    for _ in range(200):
        held = leases(client)
        if not any(held.values()):
            return held
        time.sleep(0.01)
    return held


def test_response_cancel_ends_it_cancelled_and_frees_the_models() -> None:
    with TestClient(realtime_app(chat={"tokens": 400, "token_ms": 20})) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json(NO_VAD)
            ws.receive_json()
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "talk a lot"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            ws.send_json({"type": "response.create"})
            until(ws, "response.audio_transcript.delta")
            assert leases(client)["chat"] == 1
            ws.send_json({"type": "response.cancel"})
            done, _ = until(ws, "response.done")
            assert done["response"]["status"] == "cancelled"
            assert done["response"]["status_details"]["reason"] == "client_cancelled"
            assert done["response"]["usage"]["output_tokens"] < 400
            assert leases(client)["chat"] == 0  # released before response.done went out
            assert not any(_wait_free(client).values())
            ws.send_json({"type": "response.cancel"})
            error, _ = until(ws, "error")
            assert error["error"]["code"] == "response_cancel_not_active"


def test_a_response_waiting_for_its_transcript_is_cancelled_at_once() -> None:
    with TestClient(realtime_app(stt={"token_ms": 1500})) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json(NO_VAD)
            ws.receive_json()
            append(ws, tone(300))
            ws.send_json({"type": "input_audio_buffer.commit"})
            ws.send_json({"type": "response.create"})
            until(ws, "response.created")
            ws.send_json({"type": "response.cancel"})
            done, events = until(ws, "response.done")
            assert done["response"]["status"] == "cancelled"
            assert "conversation.item.input_audio_transcription.completed" not in types(events)
            heard, _ = until(ws, "conversation.item.input_audio_transcription.completed")  # it still comes
            assert heard["transcript"].startswith("fake transcript")


def test_barge_in_cancels_the_response_and_keeps_what_was_said() -> None:
    with TestClient(realtime_app(chat={"tokens": 400, "token_ms": 20})) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            append(ws, tone(400) + tone(700, 0))
            until(ws, "response.created")
            until(ws, "response.audio_transcript.delta")
            append(ws, tone(100))  # the user speaks again
            _, events = until(ws, "response.done")
            kinds = types(events)
            assert "input_audio_buffer.speech_started" in kinds
            done = events[-1]["response"]
            assert done["status"] == "cancelled"
            assert done["status_details"]["reason"] == "turn_detected"
            assert done["output"][0]["status"] == "incomplete"
            assert leases(client)["chat"] == 0 and leases(client)["tts"] == 0
            append(ws, tone(300) + tone(700, 0))  # the new turn ends: it gets its own answer
            until(ws, "input_audio_buffer.committed")
            created, _ = until(ws, "response.created")
            assert created["response"]["id"] != done["id"]
            ws.send_json({"type": "response.cancel"})
            assert until(ws, "response.done")[0]["response"]["status"] == "cancelled"


def test_conversation_item_truncate_and_delete() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json(NO_VAD)
            ws.receive_json()
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            ws.send_json({"type": "response.create"})
            done, _ = until(ws, "response.done")
            answer = done["response"]["output"][0]
            ws.send_json(
                {"type": "conversation.item.truncate", "item_id": answer["id"], "content_index": 0, "audio_end_ms": 0}
            )
            truncated, _ = until(ws, "conversation.item.truncated")
            assert truncated["item_id"] == answer["id"]
            ws.send_json({"type": "conversation.item.retrieve", "item_id": answer["id"]})
            retrieved, _ = until(ws, "conversation.item.retrieved")
            assert retrieved["item"]["content"][0]["transcript"] == ""
            assert retrieved["item"]["status"] == "incomplete"
            ws.send_json({"type": "conversation.item.delete", "item_id": answer["id"]})
            deleted, _ = until(ws, "conversation.item.deleted")
            assert deleted["item_id"] == answer["id"]
            ws.send_json({"type": "conversation.item.retrieve", "item_id": answer["id"]})
            error, _ = until(ws, "error")
            assert error["error"]["code"] == "item_not_found"


def test_ga_session_update_switches_to_the_ga_event_names() -> None:
    update = {"type": "realtime", "audio": {"input": {"turn_detection": None}, "output": {"voice": "alloy"}}}
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json({"type": "session.update", "session": update})
            updated = ws.receive_json()
            assert updated["session"]["audio"]["input"]["turn_detection"] is None
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            ws.send_json({"type": "response.create"})
            _, events = until(ws, "response.done")
            kinds = types(events)
            assert "response.output_audio.delta" in kinds and "response.output_audio_transcript.delta" in kinds
            assert "response.audio.delta" not in kinds


def test_each_response_leaves_one_request_log_record() -> None:
    app = realtime_app()
    records: list[Any] = []
    app.state.hypnos.observers.append(records.append)
    with TestClient(app) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json(NO_VAD)
            ws.receive_json()
            ws.send_json({"type": "response.create"})  # nothing to answer yet: the response fails
            failed, events = until(ws, "response.done")
            assert failed["response"]["status"] == "failed"
            assert (
                next(e for e in events if e["type"] == "error")["error"]["message"]
                == "`messages` must be a non-empty array"
            )
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            ws.send_json({"type": "response.create"})
            until(ws, "response.done")
    realtime = [record for record in records if record.path == "/v1/realtime"]
    assert [record.status for record in realtime] == [400, 200]
    assert realtime[1].model == "chat" and realtime[1].tokens_out == 8 and realtime[1].key is None
