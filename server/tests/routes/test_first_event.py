"""A streamed chat answer goes out as soon as the engine accepts the prompt (ChatAccepted, before its prefill): the
headers and the format's first event, Messages' message_start with the input tokens of the final usage; a client
leaving during the prefill then stops it. Over the fake engine, whose prefill is `first_token_ms` long."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from litestar.testing import TestClient
from server_harness import running, start_leaving
from server_kit import build_app, config, wait_ready

ASK = [{"role": "user", "content": "Tell me about the sea and the lighthouse"}]
STREAMS = [
    ("/v1/chat/completions", {"messages": ASK, "stream": True}, b'"role":"assistant"'),
    ("/v1/messages", {"messages": ASK, "max_tokens": 8, "stream": True}, b"event: message_start"),
    ("/v1/responses", {"input": "Tell me about the sea", "stream": True}, b"event: response.created"),
]


def slow_prefill_app() -> Any:
    """One fake chat model whose prefill takes ten minutes (cancellable, checked every 10 ms)."""
    model = {"id": "slow-chat", "modality": "text_generation", "engine": "fake", "fake": {"first_token_ms": 600_000}}
    return build_app(config(models=[model]))


@pytest.mark.parametrize(("path", "body", "first"), STREAMS, ids=["chat", "messages", "responses"])
async def test_the_first_event_goes_before_the_prefill_and_leaving_then_stops_it(
    path: str, body: dict[str, Any], first: bytes
) -> None:
    app = slow_prefill_app()
    async with running(app):
        state = app.state.hypnos.scheduler.get("slow-chat")
        leaving = start_leaving(app, path, json.dumps({"model": "slow-chat", **body}).encode())
        await asyncio.wait_for(leaving.response.first_chunk_reached.wait(), 60)  # not the ten minutes of prefill
        assert leaving.response.status == 200
        assert leaving.response.headers["content-type"].startswith("text/event-stream")
        assert first in leaving.response.body
        assert state.active_leases == 1 and state.engine.cancelled_requests == 0  # still prefilling
        leaving.gone.set()
        await asyncio.wait_for(leaving.task, 60)
        for _ in range(1000):
            if state.active_leases == 0:
                break
            await asyncio.sleep(0.01)
        assert state.active_leases == 0 and state.engine.cancelled_requests == 1


def test_message_start_carries_the_input_tokens_of_the_final_usage() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        body = {"model": "fake-chat", "max_tokens": 8, "messages": ASK, "stream": True}
        reply = client.post("/v1/messages", json=body)
        assert reply.status_code == 200
        events = [json.loads(block.split("\ndata: ", 1)[1]) for block in reply.text.strip().split("\n\n")]
        start = events[0]["message"]["usage"]
        final = next(event for event in events if event["type"] == "message_delta")["usage"]
        assert start["input_tokens"] == final["input_tokens"] > 0
        assert start["cache_read_input_tokens"] == final["cache_read_input_tokens"]


def test_a_messages_stream_pings_while_the_prefill_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claude Code drops a stream silent for about 300 s (a 12k-token prompt on a loaded CPU prefills longer): the
    stream sends `ping` events while it waits on the engine."""
    from hypnos_server.routes import messages

    monkeypatch.setattr(messages, "PING_SECS", 0.05)
    model = {"id": "slow-chat", "modality": "text_generation", "engine": "fake", "fake": {"first_token_ms": 1000}}
    with TestClient(build_app(config(models=[model]))) as client:
        wait_ready(client)
        body = {"model": "slow-chat", "max_tokens": 4, "messages": ASK, "stream": True}
        reply = client.post("/v1/messages", json=body)
        assert reply.status_code == 200
        kinds = [block.split("\n", 1)[0] for block in reply.text.strip().split("\n\n")]
        waiting = kinds[kinds.index("event: message_start") : kinds.index("event: content_block_start")]
        assert waiting.count("event: ping") >= 5, kinds
        assert kinds[-1] == "event: message_stop"


@pytest.mark.parametrize(("path", "body", "first"), [STREAMS[0], STREAMS[2]], ids=["chat", "responses"])
def test_chat_and_responses_streams_send_sse_comments_while_the_prefill_runs(
    monkeypatch: pytest.MonkeyPatch, path: str, body: dict[str, Any], first: bytes
) -> None:
    """An HTTP client's read timeout (the OpenAI Python SDK's is 600 s) ends a stream silent during a long prefill:
    chat's and Responses' streams send an SSE comment (the spec's keep-alive, which clients skip) while they wait,
    and only after their first event, so an error known before it stays an HTTP error."""
    from hypnos_server.routes import inference

    monkeypatch.setattr(inference, "KEEPALIVE_SECS", 0.05)
    model = {"id": "slow-chat", "modality": "text_generation", "engine": "fake", "fake": {"first_token_ms": 1000}}
    with TestClient(build_app(config(models=[model]))) as client:
        wait_ready(client)
        reply = client.post(path, json={"model": "slow-chat", **body})
        assert reply.status_code == 200
        blocks = reply.content.strip().split(b"\n\n")
        comments = [index for index, block in enumerate(blocks) if block == b": keepalive"]
        assert len(comments) >= 5 and first in blocks[0], blocks[:3]
        assert comments[0] > 0 and comments[-1] < len(blocks) - 2  # between the first event and the answer
        events = [block for block in blocks if not block.startswith(b":")]
        assert events[-1] == b"data: [DONE]" and all(b"data: " in block for block in events)
