"""Cross-request batching: the inputs of concurrent requests on one model share a library call on its worker.

A request hands the batcher its items (texts, passes...). While the worker runs a batch, the next one gathers; when
the worker is free, a batch of up to `max_batch_size` items leaves at once when it is full, when it holds one
request's items only (a lone request never waits), or once its oldest item has waited `max_wait_ms`. A request whose
token is cancelled ends at once (its items still queued are dropped; a call it shares runs on for the others), and a
request whose input the library refuses fails alone: its batch runs again without it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, TypeVar

import msgspec

from hypnos.engine import CancelToken
from hypnos.kit.staged import Cancelled
from hypnos.kit.worker import ModelWorker

I = TypeVar("I")  # noqa: E741  an item as the request gives it
P = TypeVar("P")  # an item as the library call takes it (after `prepare`)
R = TypeVar("R")  # one item's result

BATCHING_TABLE = "batching"


class BatchingOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.batching]` table of a batching engine; a key left out takes the engine's measured default."""

    max_batch_size: Annotated[int, msgspec.Meta(ge=1, le=65536)] | None = None  # items per library call
    max_wait_ms: Annotated[float, msgspec.Meta(ge=0, le=10_000)] | None = None  # how long a batch may wait to fill


# what a batching kind adds to its EngineKind.options
BATCHING_OPTIONS: dict[str, type[Any]] = {BATCHING_TABLE: BatchingOptions}


@dataclass(frozen=True)
class BatchLimits:
    """How many items one library call takes and how long a batch of several requests may wait to fill."""

    max_batch_size: int
    max_wait_ms: float

    def configured(self, options: BatchingOptions | None) -> BatchLimits:
        """These defaults with the keys the model's `[models.batching]` table sets."""
        if options is None:
            return self
        size = self.max_batch_size if options.max_batch_size is None else options.max_batch_size
        wait = self.max_wait_ms if options.max_wait_ms is None else options.max_wait_ms
        return BatchLimits(size, wait)


@dataclass(frozen=True)
class Batched(Generic[R]):
    """A request's results in item order, and the most requests that shared a library call with it (itself included)."""

    results: list[R]
    shared: int


@dataclass(eq=False)
class _Request(Generic[I, P, R]):
    items: list[I]
    cancel: CancelToken
    future: asyncio.Future[Batched[R]]
    arrived: float
    results: list[Any] = field(default_factory=list)
    prepared: list[P] | None = None  # set on the worker when its first piece runs
    taken: int = 0  # items handed to batches so far
    answered: int = 0
    shared: int = 1

    @property
    def live(self) -> bool:
        return not self.future.done()


@dataclass(frozen=True)
class _Piece(Generic[I, P, R]):
    request: _Request[I, P, R]
    start: int
    stop: int


class Batcher(Generic[I, P, R]):
    """Runs the items of concurrent requests together: `run_batch(prepared items) -> results` (blocking, in order)
    on the model's worker; `prepare(request items) -> items` (blocking, once per request, on the worker before its
    first batch) may refuse a request's input alone."""

    def __init__(
        self,
        worker: ModelWorker,
        run_batch: Callable[[list[P]], Sequence[R]],
        limits: BatchLimits,
        prepare: Callable[[list[I]], list[P]] | None = None,
    ) -> None:
        self.worker, self.limits = worker, limits
        self._run_batch, self._prepare = run_batch, prepare
        self._queue: deque[_Request[I, P, R]] = deque()
        self._drain: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self.batches_run = 0  # library calls made (a batch run again without a refused request counts again)
        self.largest_batch = 0  # the most items one call took

    async def run(self, items: list[I], cancel: CancelToken) -> Batched[R]:
        """The results of these items in order (they may share library calls with other requests' items)."""
        if cancel.cancelled:
            raise Cancelled()
        loop = asyncio.get_running_loop()
        if not items:
            return Batched([], 1)
        request: _Request[I, P, R] = _Request(items, cancel, loop.create_future(), time.monotonic())
        request.results = [None] * len(items)
        self._queue.append(request)
        cancel.on_cancel(lambda: _threadsafe(loop, _fail, request, Cancelled()))
        if self._drain is None or self._drain.done():
            self._drain = loop.create_task(self._drain_queue(), name="hypnos-batcher")
        elif self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
        batched = await request.future
        if cancel.cancelled:
            raise Cancelled()
        return batched

    # ---- the drain task (one per batcher while requests wait) -----------------------------------------------------

    async def _drain_queue(self) -> None:
        try:
            while self._prune():
                await self._fill()
                pieces = self._take()
                if not pieces:
                    continue
                try:
                    outcomes: list[Sequence[R] | BaseException] = await self.worker.run(self._run_pieces, pieces)
                except Exception as error:  # the worker itself failed: this batch's requests fail, the others go on
                    outcomes = [error] * len(pieces)
                except BaseException:  # the loop ends: no request of this batch may be left waiting
                    for piece in pieces:
                        _fail(piece.request, Cancelled())
                    raise
                _deliver(pieces, outcomes)
        finally:  # cancelled with the loop (shutdown): nobody may wait forever
            while self._queue:
                _fail(self._queue.popleft(), Cancelled())

    def _prune(self) -> bool:
        """Drop answered and cancelled requests from the front; True while any request waits."""
        while self._queue and not self._queue[0].live:
            self._queue.popleft()
        return bool(self._queue)

    async def _fill(self) -> None:
        """Wait while a batch of several requests is short of max_batch_size and its oldest item has time left."""
        while True:
            live = [request for request in self._queue if request.live]
            waiting = sum(len(request.items) - request.taken for request in live)
            if len(live) <= 1 or waiting >= self.limits.max_batch_size:
                return
            left = live[0].arrived + self.limits.max_wait_ms / 1000 - time.monotonic()
            if left <= 0:
                return
            self._wakeup = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._wakeup, left)
            except TimeoutError:
                return
            finally:
                self._wakeup = None

    def _take(self) -> list[_Piece[I, P, R]]:
        """The next batch: pieces of the queued requests in arrival order, each request's token checked once."""
        room, pieces = self.limits.max_batch_size, []
        while room > 0 and self._queue:
            request = self._queue[0]
            if not request.live:
                self._queue.popleft()
                continue
            if request.cancel.cancelled:
                _fail(self._queue.popleft(), Cancelled())
                continue
            stop = min(len(request.items), request.taken + room)
            pieces.append(_Piece(request, request.taken, stop))
            room -= stop - request.taken
            request.taken = stop
            if stop == len(request.items):
                self._queue.popleft()
        return pieces

    # ---- on the worker --------------------------------------------------------------------------------------------

    def _run_pieces(self, pieces: list[_Piece[I, P, R]]) -> list[Sequence[R] | BaseException]:
        """Each piece's results or the error that fails its request; a refused request is run alone."""
        refused: dict[int, BaseException] = {}
        for piece in pieces:
            request = piece.request
            if request.prepared is None and id(request) not in refused:
                try:
                    request.prepared = self._prepare(request.items) if self._prepare else list(request.items)  # type: ignore[arg-type]
                except Exception as error:
                    refused[id(request)] = error
        live = [piece for piece in pieces if id(piece.request) not in refused and piece.request.live]
        answers = self._answers(live)
        return [
            refused[id(piece.request)] if id(piece.request) in refused else answers.get(id(piece), Cancelled())
            for piece in pieces
        ]

    def _answers(self, pieces: list[_Piece[I, P, R]]) -> dict[int, Sequence[R] | BaseException]:
        if not pieces:
            return {}
        requests = {id(piece.request) for piece in pieces}
        try:
            results = self._call([item for piece in pieces for item in _inputs(piece)])
        except Exception as error:
            if len(requests) == 1:
                return {id(piece): error for piece in pieces}
            answers: dict[int, Sequence[R] | BaseException] = {}
            for request in requests:  # one request's input failed the call: each request again on its own
                own = [piece for piece in pieces if id(piece.request) == request and piece.request.live]
                answers.update(self._answers(own))
            return answers
        answers, start = {}, 0
        for piece in pieces:
            piece.request.shared = max(piece.request.shared, len(requests))
            answers[id(piece)] = results[start : start + piece.stop - piece.start]
            start += piece.stop - piece.start
        return answers

    def _call(self, batch: list[P]) -> list[R]:
        self.batches_run += 1
        self.largest_batch = max(self.largest_batch, len(batch))
        results = list(self._run_batch(batch))
        if len(results) != len(batch):
            raise RuntimeError(f"the batch call returned {len(results)} results for {len(batch)} inputs")
        return results


def _inputs(piece: _Piece[Any, P, Any]) -> list[P]:
    prepared = piece.request.prepared
    assert prepared is not None
    return prepared[piece.start : piece.stop]


def _deliver(pieces: list[_Piece[Any, Any, R]], outcomes: list[Sequence[R] | BaseException]) -> None:
    """Hand each piece's results (or error) to its request; a request with every item answered is done."""
    for piece, outcome in zip(pieces, outcomes, strict=True):
        request = piece.request
        if not request.live:
            continue
        if isinstance(outcome, BaseException):
            _fail(request, outcome)
            continue
        request.results[piece.start : piece.stop] = outcome
        request.answered += piece.stop - piece.start
        if request.answered == len(request.items):
            request.future.set_result(Batched(request.results, request.shared))


def _fail(request: _Request[Any, Any, Any], error: BaseException) -> None:
    if request.live:
        request.future.set_exception(error)


def _threadsafe(loop: asyncio.AbstractEventLoop, function: Callable[..., None], *args: Any) -> None:
    """Call function(*args) on the loop's thread (a token may be cancelled from any thread)."""
    if not loop.is_closed():
        loop.call_soon_threadsafe(function, *args)
