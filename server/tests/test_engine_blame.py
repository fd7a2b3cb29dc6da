"""Engine hosts and blame: a host killed because its client left is that request's failure (never a crash that
quarantines the model for everyone), a key whose requests keep ending the host is refused with 429 first, a wedged
host is reported stalled at once and killed well before 300 s, and a stream past its bound ends with a timeout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

from server_harness import call, running, start_leaving
from server_kit import build_app

# an embedding step of 2 s that checks for cancellation only between steps: a client that leaves mid-step waits
# longer than cancel_grace_secs, so the host is killed (as docling's conversions were)
STUBBORN = {
    "id": "stubborn",
    "modality": "embeddings",
    "engine": "fake",
    "fake": {"steps": 1, "token_ms": 2000, "layer_bytes": 1 << 20},
    "process": {"cancel_grace_secs": 0.3},
}
WEDGE = {
    "id": "wedge",
    "modality": "text_generation",
    "engine": "fake",
    "fake": {"tokens": 400, "token_ms": 20, "layer_bytes": 1 << 20},
    "process": {"hang_secs": 8.0},
}
KEYS = [{"key": name, "label": name} for name in ("alice", "carol", "bob")]
EMBED = json.dumps({"model": "stubborn", "input": "hello"}).encode()


def app_with(*models: dict[str, Any], **limits: Any) -> Any:
    raw = {"server": {"isolation": "process", "keys": KEYS}, "models": list(models)}
    if limits:
        raw["limits"] = limits
    return build_app(raw)


async def until(predicate: Any, secs: float = 30.0) -> None:
    for _ in range(int(secs / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition never came true")


def working(host: Any) -> bool:
    """Whether a host runs a request's call (not only a load)."""
    return host is not None and any(call.watched for call in list(host._calls.values()))


async def abandon(app: Any, key: str) -> None:
    """An embedding request whose client leaves mid-step: its host is killed after the cancel grace."""
    state = app.state.hypnos.scheduler.get("stubborn")
    leaving = start_leaving(app, "/v1/embeddings", EMBED, {"authorization": f"Bearer {key}"})
    await until(lambda: working(state.engine.host))  # the engine's step has begun (not only its model's load)
    host = state.engine.host
    leaving.gone.set()
    await asyncio.wait_for(leaving.task, 30)
    await until(lambda: not host.alive)
    assert "after its client left" in (state.engine.last_exit or "")


async def test_hosts_killed_because_clients_left_never_quarantine_the_model_and_the_key_is_refused_first() -> None:
    app = app_with(STUBBORN)
    async with running(app):
        for key in ("alice", "alice", "alice", "carol", "carol"):  # five hosts killed, max_crashes is 5
            await abandon(app, key)
        served = await call(app, "POST", "/v1/embeddings", body=EMBED, headers={"authorization": "Bearer bob"})
        assert served.status == 200, served.body
        status = await call(app, "GET", "/v1/memory/status", headers={"authorization": "Bearer bob"})
        (entry,) = [m for m in json.loads(status.body)["models"] if m["id"] == "stubborn"]
        assert "quarantined" not in (entry["unavailable_reason"] or "")

        await abandon(app, "alice")  # alice's fourth: her requests are refused before the model could be
        refused = await call(app, "POST", "/v1/embeddings", body=EMBED, headers={"authorization": "Bearer alice"})
        assert refused.status == 429 and int(refused.headers["retry-after"]) > 0
        error = json.loads(refused.body)["error"]
        assert error["type"] == "rate_limit_error" and error["code"] == "engine_crashes"
        assert "alice" in error["message"] and "after its client left" in error["message"]
        again = await call(app, "POST", "/v1/embeddings", body=EMBED, headers={"authorization": "Bearer carol"})
        assert again.status == 200, again.body


async def test_a_wedged_host_is_reported_stalled_at_once_and_killed_at_its_bound() -> None:
    app = app_with(WEDGE)
    auth = {"authorization": "Bearer bob"}
    body = json.dumps({"model": "wedge", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    async with running(app):
        state = app.state.hypnos.scheduler.get("wedge")
        stream = asyncio.create_task(
            call(app, "POST", "/v1/chat/completions", body=body, headers={**auth, "content-type": "application/json"})
        )
        await until(lambda: working(state.engine.host))
        host = state.engine.host
        await asyncio.sleep(0.5)  # a few tokens: the model's step time is known
        os.kill(host.pid, signal.SIGSTOP)
        try:
            stalled = None
            while host.alive and stalled is None:
                status = await call(app, "GET", "/v1/memory/status", headers=auth)
                (entry,) = [m for m in json.loads(status.body)["models"] if m["id"] == "wedge"]
                stalled = (entry["engine_process"] or {}).get("stalled_secs")
                await asyncio.sleep(0.1)
            assert stalled is not None and host.alive  # reported while the host still lives
            answer = await asyncio.wait_for(stream, 30)
        finally:
            if host.pid is not None:
                os.kill(host.pid, signal.SIGCONT)
        lines = [line for line in answer.body.decode().splitlines() if line.startswith("data: {")]
        last = json.loads(lines[-1][6:])
        assert last["choices"][0]["finish_reason"] == "error" and "no progress for 8 s" in last["error"]["message"]
        assert not host.alive


async def test_a_stream_past_stream_timeout_secs_ends_with_a_timeout_and_the_model_serves_on() -> None:
    app = app_with(WEDGE, stream_timeout_secs=1)
    headers = {"authorization": "Bearer bob", "content-type": "application/json"}
    body = json.dumps({"model": "wedge", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    async with running(app):
        answer = await call(app, "POST", "/v1/chat/completions", body=body, headers=headers)  # 400 tokens: 8 s
        lines = [line for line in answer.body.decode().splitlines() if line.startswith("data: {")]
        last = json.loads(lines[-1][6:])
        assert last["choices"][0]["finish_reason"] == "error" and last["error"]["type"] == "timeout"
        assert "stream_timeout_secs" in last["error"]["message"]
        short = json.dumps({"model": "wedge", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
        again = await call(app, "POST", "/v1/chat/completions", body=short.encode(), headers=headers)
        assert again.status == 200, again.body
        assert not app.state.hypnos.scheduler.get("wedge").engine.policy.crashes  # no crash of the model
