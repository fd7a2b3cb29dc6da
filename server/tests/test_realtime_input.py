"""GET /v1/realtime refuses bad input with `error` events (or a close code), never a crash or a leaked lease; keys."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from litestar.exceptions import WebSocketDisconnect
from litestar.testing import TestClient
from realtime_kit import append, leases, realtime_app, tone, types, until
from server_kit import wait_ready

KEY = "sk-realtime-test"


def _session(client: TestClient[Any], **kwargs: Any) -> Any:
    return client.websocket_connect("/v1/realtime?model=chat", **kwargs)


def _error(ws: Any) -> dict[str, Any]:
    event, _ = until(ws, "error")
    assert set(event) == {"type", "event_id", "error"}
    assert set(event["error"]) == {"type", "code", "message", "param", "event_id"}
    return event["error"]  # type: ignore[no-any-return]


@pytest.fixture
def client() -> Any:
    with TestClient(realtime_app(limits={"max_realtime_frame_bytes": 4096, "max_audio_bytes": 48000})) as client:
        wait_ready(client)
        yield client


def test_bad_frames_are_error_events_and_the_session_goes_on(client: TestClient[Any]) -> None:
    with _session(client) as ws:
        ws.receive_json()
        ws.send_text("this is not json")
        assert _error(ws)["code"] == "invalid_json"
        ws.send_bytes(b"\xff\xfe binary")
        assert _error(ws)["code"] == "invalid_json"
        ws.send_text("[" * 2000 + "]" * 2000)
        assert _error(ws)["code"] in {"invalid_json", "invalid_event"}
        ws.send_json([1, 2])
        assert _error(ws)["code"] == "invalid_event"
        ws.send_json({"type": "no.such.event", "event_id": "evt_1"})
        error = _error(ws)
        assert error["code"] == "unknown_event_type" and error["event_id"] == "evt_1"
        ws.send_json({"type": "input_audio_buffer.append", "audio": "!!not base64!!"})
        assert _error(ws)["code"] == "invalid_audio"
        ws.send_json({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()})
        assert _error(ws)["code"] == "invalid_audio"  # an odd byte count is no pcm16
        ws.send_json({"type": "input_audio_buffer.append", "audio": 42})
        assert _error(ws)["code"] == "invalid_audio"
        ws.send_json({"type": "session.update", "session": {"input_audio_format": "g711_ulaw"}})
        assert _error(ws)["param"] == "session.input_audio_format"
        ws.send_json({"type": "session.update", "session": {"turn_detection": {"type": "server_vad", "threshold": 3}}})
        assert _error(ws)["param"] == "session.turn_detection"
        ws.send_json({"type": "session.update", "session": {"hypnos": {"speech_model": "stt"}}})
        assert _error(ws)["code"] == "model_not_found"
        ws.send_json({"type": "conversation.item.create", "item": {"type": "message", "role": "robot", "content": []}})
        assert _error(ws)["param"] == "item.role"
        ws.send_json({"type": "input_audio_buffer.commit"})
        assert _error(ws)["code"] == "input_audio_buffer_commit_empty"
        ws.send_json({"type": "session.update", "session": {"voice": "echo"}})
        assert until(ws, "session.updated")[0]["session"]["voice"] == "echo"  # still serving
    assert set(leases(client).values()) == {0}


def test_the_input_buffer_is_bounded(client: TestClient[Any]) -> None:
    with _session(client) as ws:
        ws.receive_json()
        ws.send_json({"type": "session.update", "session": {"turn_detection": None}})
        ws.receive_json()
        ws.send_json({"type": "session.update", "session": {"turn_detection": None}})  # commits are the client's
        until(ws, "session.updated")
        append(ws, tone(900), chunk_ms=40)  # 43200 bytes: under max_audio_bytes (48000)
        append(ws, tone(200), chunk_ms=40)
        assert _error(ws)["code"] == "input_audio_buffer_full"
        ws.send_json({"type": "input_audio_buffer.clear"})
        until(ws, "input_audio_buffer.cleared")
        append(ws, tone(200), chunk_ms=40)
        ws.send_json({"type": "input_audio_buffer.commit"})
        assert until(ws, "input_audio_buffer.committed")[0]["item_id"]


def test_silence_under_server_vad_is_not_kept(client: TestClient[Any]) -> None:
    with _session(client) as ws:
        ws.receive_json()
        append(ws, tone(3000, 0), chunk_ms=40)  # 144000 bytes of silence: above max_audio_bytes, never an error
        ws.send_json({"type": "input_audio_buffer.commit"})  # what is left is the prefix padding: 340 ms
        assert until(ws, "input_audio_buffer.committed")[0]["type"] == "input_audio_buffer.committed"


def test_speech_longer_than_the_buffer_is_a_turn_under_server_vad(client: TestClient[Any]) -> None:
    with _session(client) as ws:
        ws.receive_json()
        append(ws, tone(1500), chunk_ms=40)  # 72000 bytes of speech: past max_audio_bytes (48000)
        append(ws, tone(1000, 0), chunk_ms=40)
        stopped, seen = until(ws, "input_audio_buffer.speech_stopped")
        assert "error" not in types(seen)  # the turn ends at the full buffer instead of refusing the audio
        assert until(ws, "input_audio_buffer.committed")[0]["item_id"] == stopped["item_id"]
        # the tone goes on past the cut: a second turn (it may barge in on the first answer), ended by the silence
        statuses = [until(ws, "response.done")[0]["response"]["status"]]
        while statuses[-1] != "completed" and len(statuses) < 2:
            statuses.append(until(ws, "response.done")[0]["response"]["status"])
        assert statuses[-1] == "completed" and set(statuses) <= {"cancelled", "completed"}, statuses


def test_a_wrongly_typed_field_is_an_error_event_and_the_session_goes_on(client: TestClient[Any]) -> None:
    with _session(client) as ws:
        ws.receive_json()
        ws.send_json({"type": "session.update", "session": {"input_audio_format": ["pcm16"]}})
        assert _error(ws)["param"] == "session.input_audio_format"
        item = {"type": "message", "role": [], "content": [{"type": "input_text", "text": "hi"}]}
        ws.send_json({"type": "conversation.item.create", "item": item})
        assert _error(ws)["param"] == "item.role"
        item = {"type": "message", "role": "user", "content": [{"type": {}, "text": "hi"}]}
        ws.send_json({"type": "conversation.item.create", "item": item})
        assert _error(ws)["param"] == "item.content"
        ws.send_json({"type": "session.update", "session": {}})
        assert until(ws, "session.updated")[0]["type"] == "session.updated"  # still served


def test_a_frame_over_the_bound_closes_with_1009(client: TestClient[Any]) -> None:
    with _session(client) as ws:
        ws.receive_json()
        ws.send_text("x" * 5000)
        assert _error(ws)["code"] == "frame_too_large"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1009


def test_a_second_response_while_one_runs_is_refused() -> None:
    with TestClient(realtime_app(chat={"tokens": 200, "token_ms": 10})) as client:
        wait_ready(client)
        with _session(client) as ws:
            ws.receive_json()
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            ws.send_json({"type": "response.create"})
            ws.send_json({"type": "response.create"})
            assert _error(ws)["code"] == "conversation_already_has_active_response"
            ws.send_json({"type": "response.cancel"})
            assert until(ws, "response.done")[0]["response"]["status"] == "cancelled"


def test_hanging_up_mid_response_frees_the_models() -> None:
    with TestClient(realtime_app(chat={"tokens": 400, "token_ms": 20})) as client:
        wait_ready(client)
        with _session(client) as ws:
            ws.receive_json()
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            ws.send_json({"type": "response.create"})
            until(ws, "response.audio_transcript.delta")
        for _ in range(300):
            if not any(leases(client).values()):
                break
            __import__("time").sleep(0.01)
        assert set(leases(client).values()) == {0}


def _keyed() -> Any:
    return TestClient(realtime_app(server={"api_keys": [KEY]}))


def test_without_a_key_the_session_is_refused() -> None:
    with _keyed() as client:
        wait_ready(client)
        for headers in ({}, {"authorization": "Bearer wrong"}):
            with _session(client, headers=headers) as ws:
                assert _error(ws)["code"] == "invalid_api_key"
                with pytest.raises(WebSocketDisconnect) as closed:
                    ws.receive_json()
                assert closed.value.code == 1008


def test_a_bearer_key_or_the_browser_subprotocol_key_is_accepted() -> None:
    with _keyed() as client:
        wait_ready(client)
        with _session(client, headers={"authorization": f"Bearer {KEY}"}) as ws:
            assert ws.receive_json()["type"] == "session.created"
        protocols = ["realtime", f"openai-insecure-api-key.{KEY}", "openai-beta.realtime-v1"]
        with _session(client, subprotocols=protocols) as ws:
            assert ws.receive_json()["type"] == "session.created"
            assert ws.accepted_subprotocol == "realtime"


def test_an_unknown_model_or_a_foreign_origin_is_refused() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=nope") as ws:
            assert _error(ws)["code"] == "model_not_found"
            with pytest.raises(WebSocketDisconnect):
                ws.receive_json()
        with pytest.raises(WebSocketDisconnect):
            with _session(client, headers={"origin": "https://evil.example"}) as ws:
                ws.receive_json()


LIMITED = "sk-realtime-limited"


def _limited(**limits: Any) -> Any:
    keys = [{"key": LIMITED, "label": "voice", **limits}]
    return TestClient(realtime_app(server={"api_keys": [KEY], "keys": keys}))


def _ask(ws: Any) -> dict[str, Any]:
    """A text question and a response.create: the response.done, or the error event that refused it."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello there"}]}
    ws.send_json({"type": "conversation.item.create", "item": item})
    ws.send_json({"type": "response.create", "event_id": "ask", "response": {"modalities": ["text"]}})
    while (event := ws.receive_json())["type"] not in {"response.done", "error"}:
        pass
    return event  # type: ignore[no-any-return]


def test_each_response_counts_against_the_keys_requests_per_minute() -> None:
    with _limited(requests_per_minute=3) as client:
        wait_ready(client)
        with _session(client, headers={"authorization": f"Bearer {LIMITED}"}) as ws:  # the handshake is one request
            ws.receive_json()
            assert _ask(ws)["type"] == "response.done"
            assert _ask(ws)["type"] == "response.done"
            refused = _ask(ws)
            assert refused["type"] == "error", refused
            error = refused["error"]
            assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
            assert "requests_per_minute" in error["message"] and error["event_id"] == "ask"
            ws.send_json({"type": "session.update", "session": {"instructions": "Still here."}})
            assert until(ws, "session.updated")[0]["session"]["instructions"] == "Still here."  # the socket is open
            append(ws, tone(300) + tone(700, 0))  # a spoken turn under server VAD is refused the same way
            _, seen = until(ws, "error")
            assert "input_audio_buffer.committed" in types(seen) and "response.created" not in types(seen)
        admin = {"authorization": f"Bearer {KEY}"}
        records = client.get("/v1/logs", params={"route": "/v1/realtime", "status": "4xx"}, headers=admin).json()
        assert [r["status"] for r in records["records"]] == [429, 429] and records["records"][0]["key"] == "voice"
        metrics = client.get("/metrics", headers=admin).text
        assert 'hypnos_api_key_rejections_total{key="voice"} 2.0' in metrics


def test_a_response_past_the_keys_tokens_per_day_is_refused() -> None:
    with _limited(tokens_per_day=5) as client:
        wait_ready(client)
        with _session(client, headers={"authorization": f"Bearer {LIMITED}"}) as ws:
            ws.receive_json()
            done = _ask(ws)
            assert done["type"] == "response.done" and done["response"]["usage"]["total_tokens"] > 5
            refused = _ask(ws)
            assert refused["type"] == "error" and "tokens_per_day" in refused["error"]["message"]
