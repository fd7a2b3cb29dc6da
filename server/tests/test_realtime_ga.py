"""GET /v1/realtime in the SDKs' GA dialect (conversation.item.done, rate_limits.updated, output_modalities on the
response object) and the beta one (conversation.created, `modalities`), chosen by the OpenAI-Beta header."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient
from realtime_kit import append, realtime_app, tone, types, until
from server_kit import wait_ready

GA_TEXT = {"type": "realtime", "output_modalities": ["text"], "audio": {"input": {"turn_detection": None}}}
KEY = "sk-voice"
HI = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


def _connect(client: TestClient[Any], **headers: str) -> Any:
    return client.websocket_connect("/v1/realtime?model=chat", headers=headers)


def _after(events: list[dict[str, Any]], first: str, then: str) -> bool:
    kinds = types(events)
    return first in kinds and then in kinds and kinds.index(first) < kinds.index(then)


def test_ga_items_are_done_when_final_and_responses_carry_output_modalities() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            assert ws.receive_json()["type"] == "session.created"
            ws.send_json({"type": "session.update", "session": GA_TEXT})
            assert ws.receive_json()["type"] == "session.updated"
            ws.send_json({"type": "conversation.item.create", "item": HI})
            added, _ = until(ws, "conversation.item.added")
            done = ws.receive_json()
            assert done["type"] == "conversation.item.done" and done["item"] == added["item"]
            assert done["item"]["status"] == "completed" and "previous_item_id" in done
            ws.send_json({"type": "response.create", "response": {"metadata": {"turn": "1"}}})
            finished, events = until(ws, "response.done")
            created = next(e for e in events if e["type"] == "response.created")["response"]
            assert created["output_modalities"] == ["text"] and created["conversation_id"].startswith("conv_")
            assert created["metadata"] == {"turn": "1"}
            assert _after(events, "response.created", "rate_limits.updated")
            assert next(e for e in events if e["type"] == "rate_limits.updated")["rate_limits"] == []  # no keys
            item_done = next(e for e in events if e["type"] == "conversation.item.done")
            assert _after(events, "response.output_item.done", "conversation.item.done")
            assert item_done["item"]["role"] == "assistant" and item_done["item"]["status"] == "completed"
            assert item_done["item"]["content"][0]["type"] == "output_text"
            assert item_done["previous_item_id"] == added["item"]["id"]
            response = finished["response"]
            assert response["output_modalities"] == ["text"] and response["status"] == "completed"
            assert response["conversation_id"] == created["conversation_id"]


def test_ga_audio_response_and_a_committed_turn_done_once_transcribed() -> None:
    update = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json({"type": "session.update", "session": update})
            ws.receive_json()
            append(ws, tone(500))
            ws.send_json({"type": "input_audio_buffer.commit"})
            ws.send_json({"type": "response.create"})
            finished, events = until(ws, "response.done")
            turn = next(e for e in events if e["type"] == "conversation.item.done")
            assert _after(events, "conversation.item.input_audio_transcription.completed", "conversation.item.done")
            assert turn["item"]["role"] == "user"
            assert turn["item"]["content"][0]["transcript"] == "fake transcript of 24044 bytes"
            assert finished["response"]["output_modalities"] == ["audio"]
            assert finished["response"]["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
            spoken = [e["item"] for e in events if e["type"] == "conversation.item.done"][-1]
            assert spoken["role"] == "assistant" and spoken["content"][0]["type"] == "output_audio"


def test_a_function_call_item_is_done_too() -> None:
    tool = {"type": "function", "name": "lookup", "description": "Look up", "parameters": {"type": "object"}}
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client) as ws:
            ws.receive_json()
            ws.send_json({"type": "session.update", "session": {**GA_TEXT, "tools": [tool]}})
            ws.receive_json()
            ws.send_json({"type": "conversation.item.create", "item": HI})
            until(ws, "conversation.item.done")
            ws.send_json({"type": "response.create"})
            _, events = until(ws, "response.done")
            call = next(e for e in events if e["type"] == "conversation.item.done")["item"]
            assert call["type"] == "function_call" and call["name"] == "lookup" and call["status"] == "completed"


def test_rate_limits_updated_tells_what_the_key_has_left() -> None:
    keys = [{"key": KEY, "label": "voice", "requests_per_minute": 5, "tokens_per_day": 1000}]
    with TestClient(realtime_app(server={"keys": keys})) as client:
        wait_ready(client)
        with _connect(client, authorization=f"Bearer {KEY}") as ws:
            ws.receive_json()
            ws.send_json({"type": "session.update", "session": GA_TEXT})
            ws.receive_json()
            seen = []
            for _ in range(2):
                ws.send_json({"type": "conversation.item.create", "item": HI})
                ws.send_json({"type": "response.create"})
                _, events = until(ws, "response.done")
                limits = next(e for e in events if e["type"] == "rate_limits.updated")["rate_limits"]
                seen.append({limit["name"]: limit for limit in limits})
            first, second = seen
            # the socket's own admission and this response count against the minute
            assert first["requests"]["limit"] == 5 and first["requests"]["remaining"] == 3
            assert second["requests"]["remaining"] == 2
            assert 0 < first["requests"]["reset_seconds"] <= 60
            assert first["tokens"]["limit"] == 1000 and first["tokens"]["remaining"] == 1000
            assert second["tokens"]["remaining"] < 1000  # the first response's tokens were charged
            assert 0 < first["tokens"]["reset_seconds"] <= 86400


def test_the_beta_dialect_gets_conversation_created_and_no_item_done() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with _connect(client, **{"openai-beta": "realtime=v1"}) as ws:
            assert ws.receive_json()["type"] == "session.created"
            conversation = ws.receive_json()
            assert conversation["type"] == "conversation.created"
            assert conversation["conversation"]["id"].startswith("conv_")
            assert conversation["conversation"]["object"] == "realtime.conversation"
            ws.send_json({"type": "session.update", "session": {"modalities": ["text"], "turn_detection": None}})
            ws.receive_json()
            ws.send_json({"type": "conversation.item.create", "item": HI})
            until(ws, "conversation.item.created")
            ws.send_json({"type": "response.create"})
            finished, events = until(ws, "response.done")
            assert "conversation.item.done" not in types(events) and "rate_limits.updated" in types(events)
            assert finished["response"]["modalities"] == ["text"]
            assert finished["response"]["conversation_id"] == conversation["conversation"]["id"]
