"""The body-size layer (413), the body read timeout and minimum rate (408) and the timeout layer (408 until the
headers are sent)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hypnos.errors import HypnosError
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

from hypnos_server.errors import body_timeout, payload_too_large, request_timeout, send_error, slow_body


def _is_multipart(scope: Scope) -> bool:
    for key, value in scope.get("headers", []):
        if key.lower() == b"content-type":
            return value.lower().startswith(b"multipart/")
    return False


class BodyLimitLayer:
    """Refuses bodies above limits.max_body_bytes: by Content-Length up front, or while the body is read."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with a byte-counting receive, or answer 413 at once."""
        multipart = _is_multipart(scope)
        for key, value in scope.get("headers", []):
            if key.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_body_bytes:
                    await send_error(scope, send, payload_too_large(self.max_body_bytes, multipart))
                    return
        received = 0

        async def counting_receive() -> ReceiveMessage:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise payload_too_large(self.max_body_bytes, multipart)
            return message

        await self.app(scope, counting_receive, send)


class TimeoutLayer:
    """Answers 408 (plain text) when no response headers were sent within limits.request_timeout_secs."""

    def __init__(self, app: ASGIApp, timeout_secs: float) -> None:
        self.app = app
        self.timeout_secs = timeout_secs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request under a deadline that is lifted once the headers go out."""
        started = False
        deadline: asyncio.Timeout | None = None

        async def send_marking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                if deadline is not None:
                    deadline.reschedule(None)
            await send(message)

        try:
            async with asyncio.timeout(self.timeout_secs) as deadline:
                await self.app(scope, receive, send_marking)
        except TimeoutError:
            if started or deadline is None or not deadline.expired():
                raise
            await send_error(scope, send, request_timeout(self.timeout_secs))


class BodyTimeoutLayer:
    """Answers 408 (plain text, Connection: close) when a request body stalls for limits.body_timeout_secs, or
    comes slower than limits.min_body_bytes_per_sec on average once it has taken that long.

    Each wait for the next part of the body is bounded; the handler's read fails, so the request ends and its key's
    concurrency permit is given back. When the handler swallowed the failure, the 408 is still sent here.
    """

    def __init__(self, app: ASGIApp, timeout_secs: float, min_bytes_per_sec: float = 0.0) -> None:
        self.app = app
        self.timeout_secs = timeout_secs
        self.min_rate = min_bytes_per_sec

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with a receive whose body reads are bounded."""
        body_done = False
        stalled: Callable[[], HypnosError] | None = None  # the 408 of a body that stalled or came too slowly
        started = False
        loop = asyncio.get_running_loop()
        began, received = loop.time(), 0

        async def bounded_receive() -> ReceiveMessage:
            nonlocal body_done, stalled, received
            if body_done or stalled is not None:
                return await receive()
            wait, slow = self.timeout_secs, False
            if self.min_rate > 0:  # past the grace, the body must have come at min_rate on average
                due = began + self.timeout_secs + received / self.min_rate - loop.time()
                if due < wait * 0.9:  # (about as soon as the stall bound: a stall, no slow body)
                    wait, slow = max(0.0, due), True
            try:
                async with asyncio.timeout(wait):
                    message = await receive()
            except TimeoutError:
                rate, secs = self.min_rate, self.timeout_secs
                stalled = (lambda: slow_body(rate, secs)) if slow else (lambda: body_timeout(secs))
                raise stalled() from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        async def send_marking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, bounded_receive, send_marking)
        if stalled is not None and not started:
            await send_error(scope, send, stalled())
