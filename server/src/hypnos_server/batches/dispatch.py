"""One batch line through the same route a client's request takes: an in-process ASGI request to the app (below the
HTTP layers: the batch's key is already known), whose leases run at the batch priority; its record finalized as the
pipeline finalizes a request's, marked as a batch line."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
from hypnos.scheduler import Lease

from hypnos_server.asgi.keylimits import rate_limited
from hypnos_server.state import CONTEXT_KEY, RequestContext, RequestRecord, new_request_id

if TYPE_CHECKING:
    from hypnos_server.asgi.keys import ApiKey
    from hypnos_server.batches.lines import BatchLine
    from hypnos_server.state import HypnosState

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class LineLeases:
    """A batch line's scheduling: the priority its leases ask for, and the leases it got (any that yielded its slot
    to an interactive request makes the answer void: the line runs again later)."""

    priority: int
    leases: list[Lease] = field(default_factory=list)

    @property
    def yielded(self) -> bool:
        """Whether a lease of this line gave its slot back."""
        return any(lease.yielded for lease in self.leases)


@dataclass(slots=True)
class LineAnswer:
    """What the route answered a batch line: status, JSON body (or an error body), request id; `yielded`: void."""

    status: int
    body: Any
    request_id: str
    yielded: bool = False


def _scope(path: str, body: bytes, context: RequestContext) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": {CONTEXT_KEY: context},
    }


async def run_line(
    state: HypnosState,
    dispatch: Any,
    *,
    batch_id: str,
    endpoint: str,
    line: BatchLine,
    key: ApiKey | None,
    stop: asyncio.Event,
) -> LineAnswer:
    """Run one line through `dispatch` (the app below its HTTP layers); `stop` set: the line's client hangs up."""
    record = RequestRecord(
        id=new_request_id(),
        method="POST",
        path=endpoint,
        started_at=time.time(),
        route=endpoint,
        key=key.label if key is not None else None,
        model=line.model,
        batch=f"{batch_id}/{line.custom_id}",
    )
    if key is not None and key.tokens_per_day is not None:  # the key's day of tokens holds for its batch lines
        spent = key.tokens_per_day - state.limiter.tokens_today(key) <= 0
        if spent:  # 429: the line waits and retries (its requests_per_minute is left to interactive requests)
            error = rate_limited("tokens_per_day", f"The key {key.label} used its tokens for today (UTC)", 60)
            return LineAnswer(status=error.status, body=msgspec.to_builtins(error.body()), request_id=record.id)
    leases = LineLeases(priority=state.settings.server.batch_priority)
    context = RequestContext(record=record, key=key, batch=leases)
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": line.body, "more_body": False}
        await stop.wait()
        return {"type": "http.disconnect"}

    status = 500
    chunks: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    try:
        await dispatch(_scope(endpoint, line.body, context), receive, send)
    except Exception:
        logger.exception("batch %s line %d failed", batch_id, line.number)
        status, chunks = 500, [b'{"error":{"message":"The line failed on the server","type":"server_error"}}']
    finally:
        await context.run_closers()
        record.status = status
        if leases.yielded:  # a void run: nothing is charged, the line runs again
            context.key = None
            record.error_type = record.error_type or "yielded"
        context.finish(state.limiter)
        state.notify(record)
    raw = b"".join(chunks)
    try:
        body = msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError:
        body = raw.decode("utf-8", "replace")
    return LineAnswer(status=status, body=body, request_id=record.id, yielded=leases.yielded)
