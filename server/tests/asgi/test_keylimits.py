"""Per-key limits: requests_per_minute, max_concurrent (held until the last byte), tokens_per_day."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

from hypnos_server.asgi.keylimits import KeyLimiter
from hypnos_server.asgi.keys import ApiKey
from litestar.testing import TestClient
from server_harness import RawResponse, call, running
from server_kit import build_app, config, error_of, wait_ready


def keyed_app(**limits):
    key = {"key": "limited", "label": "limited", **limits}
    return build_app(config(server={"keys": [key]}))


AUTH = {"Authorization": "Bearer limited"}
CHAT = {"model": "fake-chat", "messages": [{"role": "user", "content": "hello there"}]}


def assert_rate_limited(response, code):
    assert response.status_code == 429
    assert error_of(response) == {
        "message": error_of(response)["message"],
        "type": "rate_limit_error",
        "param": None,
        "code": code,
    }
    assert int(response.headers["retry-after"]) >= 1


def test_requests_per_minute():
    with TestClient(keyed_app(requests_per_minute=2)) as client:
        wait_ready(client)
        assert client.get("/v1/models", headers=AUTH).status_code == 200
        assert client.get("/v1/models", headers=AUTH).status_code == 200
        response = client.get("/v1/models", headers=AUTH)
        assert_rate_limited(response, "requests_per_minute")
        assert int(response.headers["retry-after"]) <= 60


def test_tokens_per_day_charged_from_the_response():
    with TestClient(keyed_app(tokens_per_day=5)) as client:
        wait_ready(client)
        first = client.post("/v1/chat/completions", headers=AUTH, json=CHAT)
        assert first.status_code == 200
        assert first.json()["usage"]["total_tokens"] > 5
        response = client.post("/v1/chat/completions", headers=AUTH, json=CHAT)
        assert_rate_limited(response, "tokens_per_day")
        assert int(response.headers["retry-after"]) <= 86400


def test_tokens_per_day_charged_when_a_stream_ends():
    with TestClient(keyed_app(tokens_per_day=5)) as client:
        wait_ready(client)
        stream = client.post("/v1/chat/completions", headers=AUTH, json={**CHAT, "stream": True})
        assert stream.status_code == 200 and stream.text.endswith("data: [DONE]\n\n")
        assert_rate_limited(client.get("/v1/models", headers=AUTH), "tokens_per_day")


async def test_streamed_chat_holds_the_concurrency_permit_until_its_last_byte():
    app = keyed_app(max_concurrent=1)
    body = json.dumps({**CHAT, "stream": True}).encode()
    headers = {**AUTH, "content-type": "application/json"}
    async with running(app):
        release = asyncio.Event()
        pending = RawResponse()
        first = asyncio.create_task(
            call(
                app,
                "POST",
                "/v1/chat/completions",
                body=body,
                headers=headers,
                hold_last_byte=release,
                response=pending,
            )
        )
        await asyncio.wait_for(pending.last_chunk_reached.wait(), 10)
        assert pending.body.endswith(b"data: [DONE]\n\n")
        # everything up to [DONE] is out; the final body message is not yet taken by the client
        refused = await call(app, "GET", "/v1/models", headers=AUTH)
        assert refused.status == 429
        assert json.loads(refused.body)["error"]["code"] == "max_concurrent"
        assert int(refused.headers["retry-after"]) >= 1
        release.set()
        await first
        assert (await call(app, "GET", "/v1/models", headers=AUTH)).status == 200


def test_day_rolls_over_at_utc_midnight():
    now = [dt.datetime(2026, 1, 1, 23, 59, 30, tzinfo=dt.UTC)]
    limiter = KeyLimiter(today=lambda: now[0])
    key = ApiKey(label="k", admin=False, tokens_per_day=10)
    limiter.charge(key, 10)
    try:
        limiter.admit(key)
        raise AssertionError("expected 429")
    except Exception as error:
        assert getattr(error, "code", None) == "tokens_per_day"
        assert error.retry_after == 30  # type: ignore[attr-defined]
    now[0] = dt.datetime(2026, 1, 2, 0, 0, 1, tzinfo=dt.UTC)
    limiter.admit(key).release()


def test_sliding_window_frees_slots_after_60_seconds():
    clock = [1000.0]
    limiter = KeyLimiter(monotonic=lambda: clock[0])
    key = ApiKey(label="k", admin=False, requests_per_minute=1)
    limiter.admit(key).release()
    clock[0] += 30
    try:
        limiter.admit(key)
        raise AssertionError("expected 429")
    except Exception as error:
        assert error.retry_after == 30  # type: ignore[attr-defined]
    clock[0] += 31
    limiter.admit(key).release()


def test_a_keys_day_of_tokens_and_minute_of_requests_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    keys = [
        {"key": "tokens", "label": "tokens", "tokens_per_day": 4},
        {"key": "rpm", "label": "rpm", "requests_per_minute": 2},
    ]
    raw = config(server={"keys": keys, "data_dir": str(data)})
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        assert client.post("/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer tokens"}).is_success
        for _ in range(2):
            assert client.get("/v1/models", headers={"Authorization": "Bearer rpm"}).is_success
    with TestClient(build_app(raw)) as client:  # a new worker over the same data dir
        wait_ready(client)
        spent = client.post("/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer tokens"})
        assert_rate_limited(spent, "tokens_per_day")
        assert_rate_limited(client.get("/v1/models", headers={"Authorization": "Bearer rpm"}), "requests_per_minute")


def test_a_request_saved_a_moment_ahead_of_the_next_workers_clock_still_counts(tmp_path):
    """The file keeps request times in milliseconds: a restore within the same millisecond read the saved time as
    ahead of its own clock and dropped it (flaky in CI)."""
    from hypnos_server.asgi.usage_file import UsageFile

    key = ApiKey(label="k", admin=False, requests_per_minute=1)
    wall = dt.datetime(2026, 12, 6, 3, 0, 0, 999_600, tzinfo=dt.UTC)  # saved rounded up to ...:01.000
    first = KeyLimiter(store=UsageFile(tmp_path), monotonic=lambda: 50.0, today=lambda: wall)
    first.admit(key).release()
    first.save()
    second = KeyLimiter(store=UsageFile(tmp_path), monotonic=lambda: 7.0, today=lambda: wall)
    assert [left for name, _limit, left, _reset in second.remaining(key) if name == "requests"] == [0]


def test_usage_saved_by_one_limiter_is_restored_by_the_next(tmp_path):
    from hypnos_server.asgi.usage_file import UsageFile

    key = ApiKey(label="k", admin=False, tokens_per_day=10, requests_per_minute=1)
    first = KeyLimiter(store=UsageFile(tmp_path))
    first.admit(key).release()
    first.charge(key, 10)
    second = KeyLimiter(store=UsageFile(tmp_path))
    assert second.tokens_today(key) == 10
    assert [name for name, _limit, left, _reset in second.remaining(key) if left == 0] == ["requests", "tokens"]
