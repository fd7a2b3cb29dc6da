"""Realtime sessions are bounded: items by the characters they hold together, responses by their own
max_output_tokens, sessions by an idle timeout."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.exceptions import WebSocketDisconnect
from litestar.testing import TestClient
from realtime_kit import realtime_app, until
from server_kit import wait_ready

TEXT_ONLY = {"type": "session.update", "session": {"modalities": ["text"], "turn_detection": None}}


def _item(text: str) -> dict[str, Any]:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return {"type": "conversation.item.create", "item": item}


def _opened(ws: Any) -> None:
    ws.receive_json()  # session.created
    ws.send_json(TEXT_ONLY)
    until(ws, "session.updated")


def test_items_are_bounded_by_max_prompt_chars_together_and_alone() -> None:
    with TestClient(realtime_app(limits={"max_prompt_chars": 1000})) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            _opened(ws)
            ws.send_json(_item("x" * 1001))
            error, _ = until(ws, "error")
            assert error["error"]["code"] == "item_too_large" and "max_prompt_chars" in error["error"]["message"]
            ids = []
            for index in range(5):  # 5 x 400 characters: the oldest go once they hold more than 1000 together
                ws.send_json(_item(str(index) * 400))
                created, _ = until(ws, "conversation.item.created")
                ids.append(created["item"]["id"])
            ws.send_json({"type": "conversation.item.retrieve", "item_id": ids[0]})
            missing, _ = until(ws, "error")
            assert missing["error"]["code"] == "item_not_found"
            for kept in ids[-2:]:
                ws.send_json({"type": "conversation.item.retrieve", "item_id": kept})
                retrieved, _ = until(ws, "conversation.item.retrieved")
                assert retrieved["item"]["id"] == kept


def test_a_responses_own_max_output_tokens_bounds_it() -> None:
    with TestClient(realtime_app(chat={"tokens": 8})) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            _opened(ws)
            ws.send_json(_item("tell me a long story please"))
            until(ws, "conversation.item.created")
            ws.send_json({"type": "response.create", "response": {"max_output_tokens": 2}})
            done, _ = until(ws, "response.done")
            assert done["response"]["max_output_tokens"] == 2
            assert done["response"]["usage"]["output_tokens"] == 2
            ws.send_json({"type": "response.create", "response": {"max_output_tokens": 0}})
            error, _ = until(ws, "error")
            assert error["error"]["param"] == "response.max_output_tokens"


def test_an_idle_session_is_closed_after_the_idle_timeout() -> None:
    with TestClient(realtime_app(limits={"realtime_idle_timeout_secs": 0.5})) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            _opened(ws)
            expired, _ = until(ws, "error")
            assert expired["error"]["code"] == "session_expired"
            assert "realtime_idle_timeout_secs" in expired["error"]["message"]
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_json()
            assert closed.value.code == 1000 and closed.value.detail == "idle timeout"
