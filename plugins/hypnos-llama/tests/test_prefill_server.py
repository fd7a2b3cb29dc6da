"""A long prompt through the real server and its engine host: a Messages stream's message_start goes before the
prefill (with the real input tokens), a client leaving mid-prefill frees the slot without the host being killed, and
an error known before the first token is still an HTTP 4xx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypnos.testing.hosts import host_pid, status_entry
from hypnos_llama.testing import toml_model_config, write_tiny_llama
from hypnos_server.testing import live_server, raw_post

# A wider random model than the tiny one, in 32-token chunks: its prompt of ~3,000 tokens takes about 90 prefill
# steps (seconds on a CPU), where a cancellation needs one.
PROMPT = "".join(f"line {i}: the capital of France and the capital of Paris\n" for i in range(40))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("prefill")
    write_tiny_llama(folder / "wide.gguf", layers=4, dim=256, heads=4, kv_heads=2, ff=512, context=8192)
    model: dict[str, Any] = {
        "id": "wide",
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": "wide.gguf",
        "slots": 2,
        "context_len": 8192,
        "initial_tier": "tier1_gpu_vram",
        "llama": {"n_batch": 32, "n_ubatch": 32, "n_threads": 1},
    }
    (folder / "hypnos.toml").write_text(toml_model_config(folder, [model]))
    with live_server(folder / "hypnos.toml") as base:
        yield base


def messages_body(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": "wide", "max_tokens": 2, "messages": [{"role": "user", "content": text}], **fields}


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in text.strip().split("\n\n"):
        kind, data = block.split("\n", 1)
        found.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return found


def test_message_start_carries_the_input_tokens_of_the_final_usage(server: str) -> None:
    for _ in range(2):  # the second time the prompt's prefix is cached: input_tokens counts only the rest
        reply = httpx.post(f"{server}/v1/messages", json=messages_body("Say hello", stream=True), timeout=120)
        assert reply.status_code == 200
        events = sse_events(reply.text)
        start = events[0][1]["message"]["usage"]
        final = next(data for kind, data in events if kind == "message_delta")["usage"]
        assert start["input_tokens"] == final["input_tokens"] > 0
        assert start["cache_read_input_tokens"] == final["cache_read_input_tokens"]
    assert final["cache_read_input_tokens"] > 0


def test_a_client_leaving_mid_prefill_frees_the_slot_and_keeps_the_host(server: str) -> None:
    pid = host_pid(server, "wide")
    body = json.dumps(messages_body(PROMPT, stream=True)).encode()
    with raw_post(server, "/v1/messages", body) as sock:
        sock.settimeout(300)
        received = b""
        while b"message_start" not in received:
            piece = sock.recv(65536)
            assert piece, "the server closed the stream before message_start"
            received += piece
        assert b" 200 " in received.split(b"\r\n", 1)[0]
        assert b"content_block_delta" not in received  # no token yet: the prompt is still prefilling
    # the client left: the slot is free (the lease back), the same host serves, and the prefill stopped partway
    retry = httpx.post(f"{server}/v1/messages", json=messages_body(PROMPT, max_tokens=1), timeout=300)
    assert retry.status_code == 200
    usage = retry.json()["usage"]
    prompt_tokens = usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert prompt_tokens > 2000 and usage["cache_read_input_tokens"] < prompt_tokens // 2
    assert host_pid(server, "wide") == pid and status_entry(server, "wide")["active_leases"] == 0


def test_a_prompt_longer_than_the_model_is_still_an_http_400_when_streamed(server: str) -> None:
    too_long = "the capital of France " * 3000  # more tokens than the model's 8,192
    reply = httpx.post(f"{server}/v1/messages", json=messages_body(too_long, stream=True), timeout=120)
    assert reply.status_code == 400
    assert reply.json()["type"] == "error" and reply.json()["error"]["type"] == "invalid_request_error"
    chat = {"model": "wide", "max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": too_long}]}
    reply = httpx.post(f"{server}/v1/chat/completions", json=chat, timeout=120)
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "context_length_exceeded"
