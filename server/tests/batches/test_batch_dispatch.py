"""A batch line of a key that spent its day of tokens waits (429, retried later) without reaching its route."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from hypnos.config import Settings
from hypnos_server.asgi.keylimits import KeyLimiter
from hypnos_server.asgi.keys import ApiKey
from hypnos_server.batches.dispatch import run_line
from hypnos_server.batches.lines import BatchLine

LINE = BatchLine(number=1, custom_id="a", body=b'{"model": "m", "input": "x"}', model="m")


def test_a_line_of_a_key_without_tokens_left_waits() -> None:
    key = ApiKey(label="k", admin=False, tokens_per_day=10)
    limiter = KeyLimiter()
    state: Any = SimpleNamespace(settings=Settings(), limiter=limiter, notify=lambda record: None)
    reached: list[dict[str, Any]] = []

    async def dispatch(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def run() -> int:
        answer = await run_line(
            state, dispatch, batch_id="batch_1", endpoint="/v1/embeddings", line=LINE, key=key, stop=asyncio.Event()
        )
        return answer.status

    assert asyncio.run(run()) == 200 and len(reached) == 1
    limiter.charge(key, 10)
    assert asyncio.run(run()) == 429 and len(reached) == 1  # the route never saw it
