"""A raw ASGI harness for concurrency tests: drives the lifespan and can hold a response's last byte."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[None]:
    """Run the app's lifespan: startup and staging done on entry, shutdown at exit."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    for _ in range(1000):  # staging runs in the background: wait for it like a client polling /ready
        if app.state.hypnos.scheduler.ready:
            break
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task


@dataclass
class RawResponse:
    """What the app sent."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    first_chunk_reached: asyncio.Event = field(default_factory=asyncio.Event)
    last_chunk_reached: asyncio.Event = field(default_factory=asyncio.Event)


async def call(
    app: Any,
    method: str,
    path: str,
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    hold_last_byte: asyncio.Event | None = None,
    hold_first_chunk: asyncio.Event | None = None,
    disconnect: asyncio.Event | None = None,
    response: RawResponse | None = None,
    raw_path: bytes | None = None,
) -> RawResponse:
    """One HTTP request; hold_first_chunk / hold_last_byte block that body message until the event is set;
    setting `disconnect` makes the connection report that the client went away; `raw_path` is the undecoded path."""
    out = response or RawResponse()
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    raw_headers.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode() if raw_path is None else raw_path,
        "root_path": "",
        "query_string": b"",
        "headers": raw_headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 9999),
    }
    sent_body = False
    finished = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        # like a server: the connection reports a disconnect once the response is over, or when the client leaves
        waiters = [asyncio.ensure_future(finished.wait())]
        if disconnect is not None:
            waiters.append(asyncio.ensure_future(disconnect.wait()))
        _, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in pending:
            waiter.cancel()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out.status = message["status"]
            out.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            out.body += message.get("body", b"")
            if not out.first_chunk_reached.is_set():
                out.first_chunk_reached.set()
                if hold_first_chunk is not None:
                    await hold_first_chunk.wait()
            if not message.get("more_body", False):
                out.last_chunk_reached.set()
                if hold_last_byte is not None:
                    await hold_last_byte.wait()
                finished.set()

    await app(scope, receive, send)
    return out


@dataclass
class Leaving:
    """A request in flight whose client can hang up: set `gone`, then await `task`."""

    task: asyncio.Task[RawResponse]
    response: RawResponse
    gone: asyncio.Event


def start_leaving(app: Any, path: str, body: bytes, headers: dict[str, str] | None = None) -> Leaving:
    """Start a POST whose connection reports the client gone once `gone` is set."""
    gone = asyncio.Event()
    response = RawResponse()
    headers = {"content-type": "application/json", **(headers or {})}
    task = asyncio.create_task(call(app, "POST", path, body=body, headers=headers, disconnect=gone, response=response))
    return Leaving(task, response, gone)
