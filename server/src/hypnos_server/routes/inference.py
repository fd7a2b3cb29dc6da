"""What every inference route shares: body decoding, the staging guard, lease options, leased streams, responses."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, TypeVar

import anyio
import msgspec
from hypnos.engine import DeviceOutOfMemory
from hypnos.errors import HypnosError, invalid_request, server_error, staging
from hypnos.scheduler import Lease
from hypnos.types import Modality
from litestar import Request, Response
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from hypnos_server.errors import field_error
from hypnos_server.state import HypnosState, RequestContext, hypnos_state

logger = logging.getLogger(__name__)

T = TypeVar("T")


def ready_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """503 model_not_available with Retry-After: 5 while the startup models are being staged."""
    if not hypnos_state(connection).scheduler.ready:
        raise staging()


async def decode_json(request: Request[Any, Any, Any], type_: type[T]) -> T:
    """The JSON body decoded into a request Struct; 400 naming the field on a bad body."""
    body = await request.body()
    if not body:
        raise HypnosError(400, "invalid_request_error", "The request body is empty; send a JSON object")
    try:
        return msgspec.json.decode(body, type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise field_error(error) from None


async def read_form(request: Request[Any, Any, Any]) -> Any:
    """The multipart form; 400 when a text part is not valid in its charset (Litestar decodes those itself)."""
    try:
        return await request.form()
    except (UnicodeDecodeError, LookupError):
        raise invalid_request(
            "A form field is not valid text in its charset; send files as parts with a filename"
        ) from None


def encode(obj: Any) -> bytes:
    """JSON bytes of a response object (dicts, lists and Structs)."""
    return msgspec.json.encode(obj)


def json_response(obj: Any, headers: dict[str, str] | None = None, status: int = 200) -> Response[bytes]:
    """An application/json response of already-shaped data."""
    return Response(content=encode(obj), status_code=status, media_type="application/json", headers=headers or {})


def lease_for(request: Request[Any, Any, Any], model: str, modality: Modality) -> AbstractAsyncContextManager[Lease]:
    """The scheduler lease for this request, honouring x-hypnos-deadline-ms and x-hypnos-next-model."""
    deadline: int | None = None
    raw = request.headers.get("x-hypnos-deadline-ms")
    if raw is not None:
        try:
            deadline = int(float(raw))
        except ValueError:
            raise HypnosError(
                400, "invalid_request_error", "x-hypnos-deadline-ms must be a number of milliseconds"
            ) from None
    next_model = request.headers.get("x-hypnos-next-model") or None
    scheduler = hypnos_state(request).scheduler
    return scheduler.lease(model, modality, deadline_ms=deadline, next_model=next_model)


def wait_headers(lease: Lease) -> dict[str, str]:
    """x-hypnos-estimated-wait-ms when the scheduler made an estimate."""
    wait = getattr(lease, "estimated_wait_ms", None)
    return {} if wait is None else {"x-hypnos-estimated-wait-ms": str(int(wait))}


def note_lease(context: RequestContext, lease: Lease) -> None:
    """Copy what the lease cost into the request record."""
    record = context.record
    record.model = lease.model_id
    record.previous_tier = str(lease.previous_tier)
    record.tier_switch_ms = round(lease.tier_switch_latency_ms, 3)


async def call_engine(state: HypnosState, lease: Lease, work: Callable[[], Awaitable[T]]) -> T:
    """Run an engine call, retried once after a device OOM (the lease evicts idle models first); map failures."""
    try:
        retrying = getattr(lease, "run_with_oom_retry", None)
        if retrying is not None:
            return await retrying(lambda _engine: work())  # type: ignore[no-any-return]
        try:
            return await work()
        except DeviceOutOfMemory:
            logger.warning("device out of memory on %s; retrying once", lease.model_id)
            return await work()
    except HypnosError:
        raise
    except Exception as error:
        raise engine_failure(lease.model_id, error) from error
    except BaseException:
        lease.cancel.cancel()
        raise


async def call_engine_watching(
    request: Request[Any, Any, Any], state: HypnosState, lease: Lease, work: Callable[[], Awaitable[T]]
) -> T:
    """call_engine for a non-streaming route whose body was read: a client disconnect meanwhile cancels the lease's
    token, so the engine stops at its next step and the lease is freed (the ASGI server does not cancel us)."""

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        lease.cancel.cancel()

    watcher = asyncio.create_task(watch())
    try:
        return await call_engine(state, lease, work)
    finally:
        watcher.cancel()


def engine_failure(model: str, error: Exception) -> HypnosError:
    """500 server_error for an engine exception that is not a HypnosError (no traceback in the message)."""
    logger.error("the engine of %s failed", model, exc_info=error)
    return server_error(f"The model `{model}` failed: {type(error).__name__}: {error}")


class LeasedStream:
    """A streamed body that holds its lease until the last chunk: open() admits (errors stay HTTP errors)."""

    def __init__(
        self,
        context: RequestContext,
        lease_cm: AbstractAsyncContextManager[Lease],
        produce: Callable[[Lease], AsyncIterator[bytes]],
    ) -> None:
        self.context = context
        self._lease_cm = lease_cm
        self._produce = produce
        self._stack = AsyncExitStack()
        self.lease: Lease | None = None

    async def open(self) -> Lease:
        """Enter the lease; from here on the pipeline releases it even if the body never starts."""
        self.context.defer(self.close)
        self.lease = await self._stack.enter_async_context(self._lease_cm)
        note_lease(self.context, self.lease)
        return self.lease

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """The body chunks; a client disconnect cancels the engine through the lease's CancelToken."""
        assert self.lease is not None, "open() first"
        started = time.perf_counter()
        try:
            async for chunk in self._produce(self.lease):
                yield chunk
        except BaseException:
            self.lease.cancel.cancel()
            self.context.record.error = self.context.record.error or "the client went away"
            raise
        finally:
            self.context.record.inference_ms = round((time.perf_counter() - started) * 1000, 3)
            await self.close()

    async def close(self) -> None:
        """Release the lease (idempotent; shielded, since a disconnect cancels the task that streams)."""
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()
