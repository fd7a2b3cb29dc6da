"""The inference runner every route goes through: lease, engine work, timings, record, release, the client watched."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import msgspec
from hypnos.engine import DeviceOutOfMemory, Engine
from hypnos.errors import HypnosError, clip, invalid_request, server_error, staging
from hypnos.scheduler import Lease
from hypnos.types import EngineTiming, HypnosTelemetry, Modality
from litestar import Request, Response
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler
from litestar.types import Receive

from hypnos_server.errors import field_error, too_deep
from hypnos_server.state import HypnosState, RequestContext, hypnos_state, request_context

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How long a cancelled engine call may take to reach its next cancellation check before the lease is let go anyway.
CANCEL_GRACE_SECS = 15.0
STREAM_QUEUE_CHUNKS = 16
# A streamed response silent this long (a long prefill on a CPU) sends its keep-alive: an HTTP client's read timeout
# (the OpenAI Python SDK's is 600 s) and proxies see the stream alive
KEEPALIVE_SECS = 15.0
_END = object()


async def ready_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """503 model_not_available with Retry-After: 5 while the startup models are being staged (async: Litestar runs a
    sync guard in a worker thread, a thread hop on every inference request)."""
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
    except RecursionError:
        raise too_deep() from None


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


def _deadline_ms(request: Request[Any, Any, Any]) -> int | None:
    return parse_deadline(request.headers.get("x-hypnos-deadline-ms"))


def parse_deadline(raw: str | None) -> int | None:
    """x-hypnos-deadline-ms as whole milliseconds; 400 unless a finite number >= 0."""
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise invalid_request("x-hypnos-deadline-ms must be a finite number of milliseconds >= 0")
    return int(value)


def wait_headers(lease: Lease) -> dict[str, str]:
    """x-hypnos-estimated-wait-ms when the scheduler made an estimate."""
    wait = lease.estimated_wait_ms
    return {} if wait is None else {"x-hypnos-estimated-wait-ms": str(int(wait))}


def engine_failure(model: str, error: Exception) -> HypnosError:
    """500 server_error for an engine exception that is not a HypnosError: logged whole, never echoed."""
    logger.error("the engine of %s failed", clip(model), exc_info=error)
    return server_error(engine_failed_message(model))


def engine_failed_message(model: str) -> str:
    """What a client is told when an engine raised: which model, and how to report it; no exception text."""
    return f"The model `{clip(model)}` failed; report it with the x-request-id of this response"


def engine_timeout(model: str, seconds: float) -> HypnosError:
    """504 timeout: the engine call outlasted limits.engine_timeout_secs while the client waited."""
    return HypnosError(
        504, "timeout", f"The model `{clip(model)}` did not answer within {seconds:g} s (limits.engine_timeout_secs)"
    )


def client_gone() -> HypnosError:
    """What a request whose client hung up ends with (nobody reads it; the record keeps it)."""
    return HypnosError(499, "cancelled", "the client went away")


@dataclass
class Caller:
    """Whom a run serves: the server's state, the request context whose record it fills, what tells of a hang-up
    (an ASGI receive whose `http.disconnect` cancels the work) and the request's deadline and next-model hints."""

    state: HypnosState
    context: RequestContext
    receive: Receive
    deadline_ms: int | None = None
    next_model: str | None = None

    @classmethod
    def of(cls, request: Request[Any, Any, Any]) -> Caller:
        """The caller of an HTTP request."""
        return cls(
            state=hypnos_state(request),
            context=request_context(request),
            receive=request.receive,
            deadline_ms=_deadline_ms(request),
            next_model=request.headers.get("x-hypnos-next-model") or None,
        )


class InferenceRun:
    """One request's way through a model, the same for every route, streamed or not.

    `open()` admits and leases the model for every modality the request needs (errors stay HTTP errors) and defers
    the release to the end of the response; `call()` runs the engine (retried once after a device OOM) while
    watching the client, whose hang-up cancels the work through the lease's CancelToken; `stream()` makes a
    response body whose production continues to its end after a hang-up (cancelled, so the engine stops at its
    next check) so that the record is complete and the model is free before the lease goes back.
    """

    def __init__(
        self,
        caller: Request[Any, Any, Any] | Caller,
        model: str,
        modalities: Sequence[Modality],
    ) -> None:
        """`caller`: the HTTP request served, or a Caller standing for one (a background run, a realtime stage)."""
        caller = caller if isinstance(caller, Caller) else Caller.of(caller)
        self.state: HypnosState = caller.state
        self.context: RequestContext = caller.context
        self.record = self.context.record
        self.record.model = model
        self.model = model
        self.modalities = list(dict.fromkeys(modalities))
        key = self.context.key
        self.owner = key.label if key is not None else None  # whose failure a host this request brings down is
        self.state.scheduler.serving(model, *self.modalities, owner=self.owner)
        self._deadline = caller.deadline_ms
        self._next_model = caller.next_model
        self._receive = caller.receive
        self._stack = AsyncExitStack()
        self._lease: Lease | None = None
        self._started = 0.0
        self._began: float | None = None  # when the engine began, if before open() returned (a Ray node's stream)
        self.inference_ms = 0.0
        self._pump: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue(STREAM_QUEUE_CHUNKS)
        self._keepalive: bytes | None = None
        self._out_at = 0.0  # the loop's time when the body last took an item (keep-alives count from it)
        self._gone = False
        self._delivered = False  # the body reached its end

    @property
    def lease(self) -> Lease:
        """The lease (after open())."""
        assert self._lease is not None, "open() first"
        return self._lease

    @property
    def leased(self) -> bool:
        """Whether open() has been granted its lease."""
        return self._lease is not None

    @property
    def engine(self) -> Engine:
        """The leased model's engine."""
        return self.lease.engine

    async def open(self, stream: tuple[str, Any] | None = None) -> Lease:
        """Enter the lease; from here on the pipeline releases it even if the body never starts. `stream` (engine
        method, argument): the stream the request will read first, started with the lease on a Ray cluster."""
        self.context.defer(self.close)
        backend = self.state.backend
        extra: dict[str, Any] = {} if stream is None or self.state.cluster is None else {"stream": stream}
        batch = self.context.batch
        if batch is not None and self.state.cluster is None:  # a batch line: below every interactive request
            extra["priority"] = batch.priority
        lease_cm = backend.lease(
            self.model, self.modalities, deadline_ms=self._deadline, next_model=self._next_model, **extra
        )
        lease = await self._unless_hung_up(self._stack.enter_async_context(lease_cm))
        lease.cancel.owner = self.owner
        self._lease = lease
        if batch is not None:
            batch.leases.append(lease)
        self._began = getattr(lease.engine, "began_with_lease", None)
        record = self.record
        record.model = lease.model_id
        record.modalities = [str(m) for m in lease.modalities]
        record.previous_tier = str(lease.previous_tier)
        record.tier_switch_ms = round(lease.tier_switch_latency_ms, 3)
        return lease

    async def _unless_hung_up(self, entering: Awaitable[Lease]) -> Lease:
        """Enter the lease while watching the client: the request may queue for a slot, wait for its model to load
        (or on a Ray node prefill its stream) before it is granted, and a hang-up meanwhile leaves the queue or lets
        the lease go (the request ends 499; a load goes on for the next request)."""
        task = asyncio.ensure_future(entering)
        watcher = asyncio.ensure_future(self._client_hung_up())
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not watcher.done():
                return task.result()
            self._gone = True
            raise client_gone()
        except BaseException:  # the client left, or cancelled from outside (timeout, shutdown): the wait ends first
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({task})
            if not task.cancelled() and task.exception() is None:  # granted as it ended: close() releases it
                task.result().cancel.cancel()
            raise
        finally:
            watcher.cancel()

    async def __aenter__(self) -> InferenceRun:
        await self.open()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def headers(self) -> dict[str, str]:
        """x-hypnos-estimated-wait-ms when the scheduler made an estimate."""
        return wait_headers(self.lease)

    def telemetry(self, timing: EngineTiming | None) -> HypnosTelemetry:
        """The hypnos_telemetry of this request (also kept in the record for /metrics)."""
        inference_ms = self.inference_ms or (time.perf_counter() - self._started) * 1000
        telemetry = self.lease.telemetry(timing, inference_ms)
        self.record.telemetry = telemetry
        return telemetry

    # ---- whole answers -------------------------------------------------------------------------------------------

    async def call(self, work: Callable[[Engine], Awaitable[T]]) -> T:
        """Run `work(engine)` (once more after a device OOM) while watching the client; a hang-up cancels it, and so
        does limits.engine_timeout_secs passing first (504 timeout once the engine stopped)."""
        lease = self.lease
        self._started = started = self._start_clock()
        task = asyncio.ensure_future(self._with_oom_retry(work))
        watcher = asyncio.ensure_future(self._client_hung_up())
        bound = self.state.settings.limits.engine_timeout_secs
        try:
            await asyncio.wait({task, watcher}, timeout=bound or None, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():  # stop the engine at its next check, then let the model go
                lease.cancel.cancel()
                if not watcher.done():  # the bound passed with the client still waiting
                    await self._settle(task)
                    raise engine_timeout(lease.model_id, bound)
                self._gone = True  # the client hung up
                await self._settle(task)
                raise client_gone()
            return task.result()
        except BaseException:
            if not task.done():  # cancelled from outside (timeout, shutdown): the engine stops too
                lease.cancel.cancel()
                with anyio.CancelScope(shield=True):
                    await self._settle(task)
            raise
        finally:
            watcher.cancel()
            self._note_time(started)

    def _start_clock(self) -> float:
        """When the engine work began: now, or earlier when the engine began with the lease (used once)."""
        began, self._began = self._began, None
        return time.perf_counter() if began is None else began

    async def _with_oom_retry(self, work: Callable[[Engine], Awaitable[T]]) -> T:
        try:
            return await self.lease.run_with_oom_retry(work)
        except (HypnosError, DeviceOutOfMemory):
            raise
        except Exception as error:
            raise engine_failure(self.lease.model_id, error) from error

    async def _client_hung_up(self) -> None:
        """Return when the connection reports http.disconnect (the body was read before)."""
        try:
            while True:
                message = await self._receive()
                if message.get("type") == "http.disconnect":
                    return
        except Exception:  # a connection that cannot tell never reports a hang-up
            await asyncio.get_running_loop().create_future()

    async def _settle(self, task: asyncio.Future[Any]) -> None:
        """Wait (bounded) for cancelled work to stop; its outcome is nobody's answer any more."""
        done, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_SECS)
        if not done:
            logger.warning(
                "the engine of %s did not stop within %.0f s of its cancellation", self.model, CANCEL_GRACE_SECS
            )
            task.cancel()
            await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            logger.debug("cancelled work on %s ended with %r", self.model, task.exception())

    def _note_time(self, started: float) -> None:
        self.inference_ms = (time.perf_counter() - started) * 1000
        self.record.inference_ms = round(self.inference_ms, 3)

    # ---- streams -------------------------------------------------------------------------------------------------

    def stream(
        self, produce: Callable[[Lease], AsyncIterator[bytes]], keepalive: bytes | None = None
    ) -> AsyncIterator[bytes]:
        """The body of a streamed response; `produce` runs in its own task, to its end even if the client leaves;
        `keepalive` goes out whenever KEEPALIVE_SECS pass without a chunk after the first (an SSE comment during a
        long prefill)."""
        self._keepalive = keepalive
        self._pump = asyncio.ensure_future(self._run_pump(produce(self.lease)))
        return self._body()

    async def _keep_alive(self, comment: bytes) -> None:
        """Queue `comment` whenever the body has taken nothing for KEEPALIVE_SECS (one timer per stream, not one
        per chunk)."""
        loop = asyncio.get_running_loop()
        while not self._gone:
            silent = loop.time() - self._out_at
            if silent < KEEPALIVE_SECS:
                await asyncio.sleep(KEEPALIVE_SECS - silent)
            elif self._queue.empty():
                self._queue.put_nowait(comment)
                self._out_at = loop.time()
            else:  # a chunk is waiting for the body
                await asyncio.sleep(KEEPALIVE_SECS)

    async def _run_pump(self, chunks: AsyncIterator[bytes]) -> None:
        self._started = self._start_clock()
        try:
            async for chunk in chunks:
                if not self._gone:
                    await self._queue.put(chunk)
        except BaseException as error:
            if not self._gone:
                await self._queue.put(error)
            if not isinstance(error, Exception):
                raise
        finally:
            self._note_time(self._started)
            if not self._gone:
                await self._queue.put(_END)

    async def _body(self) -> AsyncIterator[bytes]:
        queue = self._queue
        loop = asyncio.get_running_loop()
        ticker: asyncio.Task[None] | None = None
        try:
            while True:
                item = await queue.get()
                self._out_at = loop.time()
                if ticker is None and self._keepalive is not None:
                    ticker = asyncio.ensure_future(self._keep_alive(self._keepalive))
                if type(item) is bytes and not queue.empty():  # chunks already waiting go out in one write
                    pending, item = [item], None
                    while not queue.empty():
                        waiting = queue.get_nowait()
                        if type(waiting) is not bytes:
                            item = waiting  # the end or an error, after the chunks before it
                            break
                        pending.append(waiting)
                    yield b"".join(pending)
                    if item is None:
                        continue
                if item is _END:
                    self._delivered = True
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        except BaseException:
            if self._pump is not None and not self._pump.done():
                self._hang_up()
            raise
        finally:
            if ticker is not None:
                ticker.cancel()

    def _hang_up(self) -> None:
        """The client left mid-stream: the engine stops at its next check; what it still makes is dropped."""
        if self._gone:
            return
        self._gone = True
        self.lease.cancel.cancel()
        self.record.error = self.record.error or "the client went away"
        self.record.error_type = self.record.error_type or "cancelled"
        while not self._queue.empty():  # unblock a pump waiting for room
            self._queue.get_nowait()

    async def close(self) -> None:
        """Let the stream's production finish (cancelled if the client left), then release the lease (idempotent)."""
        with anyio.CancelScope(shield=True):
            pump = self._pump
            if pump is not None and not pump.done():
                if not self._delivered:
                    self._hang_up()
                await self._settle(pump)
            await self._stack.aclose()
