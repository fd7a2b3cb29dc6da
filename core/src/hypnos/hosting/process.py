"""One running engine host seen from the server: the child process, its sockets, the calls in flight, the watchdog.

A host that dies is noticed at once (its socket closes; no polling), every call in flight fails with the spec's
error, and the owner hears why and whom to blame. A call that makes no progress a few seconds beyond its step time is
reported stalled at once; after `hang_secs` the host is killed, a crash of the model. A call that has not stopped
`cancel_grace_secs` after its client left (or after its stream outlived `stream_timeout_secs`) gets the host killed
too, but that is the request's failure: the owner hears the blame fall on the request's key, not on the model.
A host whose resident set passes its memory wall while it serves is killed too: the request's failure
(400 host_memory_limit), never the model's crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypnos.config import ProcessConfig
from hypnos.engine import CancelToken
from hypnos.errors import HypnosError, clip, server_error
from hypnos.hosting.frames import Failure, Kind, pack, payload_of, read_frame, shared_dir
from hypnos.hosting.host import HostStart
from hypnos.hosting.memory_wall import memory_limit_error
from hypnos.hosting.supervision import HostBlame, exit_reason, rss_bytes

logger = logging.getLogger(__name__)

WATCH_SECS = 0.25  # how often the watchdog looks at the calls in flight
STALL_MARGIN_SECS = 3.0  # a call without progress this long beyond the model's step time is reported stalled
_END = object()


@dataclass
class _Call:
    """A call in flight: where its result goes, when it last made progress, when its client left."""

    stream: asyncio.Queue[Any] | None
    future: asyncio.Future[Any] | None
    watched: bool  # request calls are watched for hangs; lifecycle calls (load, unload) are not
    owner: str | None = None  # the key's label of the request it serves
    started: float = field(default_factory=time.monotonic)
    last_progress: float = field(default_factory=time.monotonic)
    cancelled_at: float | None = None
    timed_out: bool = False  # a stream past stream_timeout_secs, cancelled by the server


class HostProcess:
    """The server's side of one engine host. `on_ask(name, payload)` answers the engine's questions (KV parking),
    `on_note(payload)` takes its notices, `on_exit(reason, blame)` hears of an exit the server did not ask for and
    whom it falls on; `hang_secs` and `stream_timeout_secs` (0: none) bound a call's silence and a stream's life."""

    def __init__(
        self,
        model_id: str,
        process: ProcessConfig,
        env: dict[str, str],
        on_ask: Callable[[str, Any], Any],
        on_note: Callable[[Any], None],
        on_exit: Callable[[str, HostBlame], None],
        hang_secs: float = 300.0,
        stream_timeout_secs: float = 0.0,
    ) -> None:
        self.model_id, self.process, self.env = model_id, process, env
        self.on_ask, self.on_note, self.on_exit = on_ask, on_note, on_exit
        self.hang_secs, self.stream_timeout_secs = hang_secs, stream_timeout_secs
        self.step_secs = 0.0  # the model's usual time between two signs of progress of a call (a moving average)
        self.culprit: _Call | None = None  # the call whose own fault the kill was (its client left, it ran too long)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0  # unix seconds
        self.share = Path(".")
        self.alive = False
        self.stopping = False
        self.kill_reason: str | None = None
        self.memory_limit: int | None = None  # the resident set the host may reach while serving (None: no wall)
        self.memory_killed = False  # the memory wall killed the host (its culprit gets 400 host_memory_limit)
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.exited = asyncio.Event()

    @property
    def pid(self) -> int | None:
        """The host's process id while it runs."""
        return self.proc.pid if self.proc is not None and self.alive else None

    async def start(self, start: HostStart) -> None:
        """Spawn the host and have it build the engine (within start_timeout_secs)."""
        self._loop = asyncio.get_running_loop()
        main_here, main_there = socket.socketpair()
        ask_here, ask_there = socket.socketpair()
        self.share = Path(tempfile.mkdtemp(prefix="hypnos-host-", dir=shared_dir()))
        start.share_dir = str(self.share)
        command = [sys.executable, "-m", "hypnos.hosting", str(main_there.fileno()), str(ask_there.fileno())]
        try:  # spawned from the event loop's thread: PR_SET_PDEATHSIG follows the thread that forked
            self.proc = subprocess.Popen(  # noqa: ASYNC220 (fork+exec returns at once; it must run on this thread)
                command, pass_fds=(main_there.fileno(), ask_there.fileno()), env=self.env, stdin=subprocess.DEVNULL
            )
        finally:
            main_there.close()
            ask_there.close()
        self.alive, self.started_at = True, time.time()
        reader, self._writer = await asyncio.open_connection(sock=main_here)
        ask_reader, ask_writer = await asyncio.open_connection(sock=ask_here)
        self._tasks = [
            asyncio.create_task(self._read(reader), name=f"hypnos-host-read-{self.model_id}"),
            asyncio.create_task(self._answer(ask_reader, ask_writer), name=f"hypnos-host-ask-{self.model_id}"),
            asyncio.create_task(self._watch(), name=f"hypnos-host-watch-{self.model_id}"),
        ]
        try:
            await asyncio.wait_for(self.call("start", (start,)), self.process.start_timeout_secs)
        except TimeoutError:
            self.kill(f"did not start within {self.process.start_timeout_secs:g} s")
            await self.exited.wait()
            raise server_error(f"the engine host of `{clip(self.model_id)}` did not start in time") from None

    # ---- calls ----------------------------------------------------------------------------------------------------

    def _open(self, name: str, args: tuple[Any, ...], call: _Call) -> int:
        if not self.alive or self._writer is None:
            raise self._gone_error()
        call_id = next(self._ids)
        self._calls[call_id] = call
        self._writer.write(pack(Kind.CALL, call_id, name, args, share_in=self.share))
        return call_id

    async def call(self, name: str, args: tuple[Any, ...], cancel: CancelToken | None = None) -> Any:
        """Run one engine method in the host and return its result (its HypnosError raised here)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        owner = cancel.owner if cancel is not None else None
        call_id = self._open(name, args, _Call(stream=None, future=future, watched=cancel is not None, owner=owner))
        if cancel is not None:
            cancel.on_cancel(lambda: self._cancel_soon(call_id))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self._cancel_soon(call_id)
            raise

    async def stream(self, name: str, args: tuple[Any, ...], cancel: CancelToken) -> AsyncGenerator[Any, None]:
        """Run one streaming engine method in the host and yield its items; closing early cancels it there."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        call_id = self._open(name, args, _Call(stream=queue, future=None, watched=True, owner=cancel.owner))
        cancel.on_cancel(lambda: self._cancel_soon(call_id))
        finished = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    finished = True
                    return
                if isinstance(item, HypnosError):
                    finished = True
                    raise item
                yield item
        finally:
            if not finished:
                self._cancel_soon(call_id)

    def _cancel_soon(self, call_id: int) -> None:
        """Tell the host a call's client left (safe from any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._cancel(call_id)
        else:
            loop.call_soon_threadsafe(self._cancel, call_id)

    def _cancel(self, call_id: int) -> None:
        call = self._calls.get(call_id)
        if call is None or call.cancelled_at is not None or self._writer is None or not self.alive:
            return
        call.cancelled_at = time.monotonic()
        self._writer.write(pack(Kind.CANCEL, call_id))

    # ---- the host's side ------------------------------------------------------------------------------------------

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while (frame := await read_frame(reader)) is not None:
                kind, call = frame.kind, self._calls.get(frame.id)
                if kind == Kind.PROGRESS:
                    now = time.monotonic()
                    for call_id in payload_of(frame) or []:
                        if (moved := self._calls.get(call_id)) is not None:
                            self._progressed(moved, now)
                elif kind == Kind.NOTE:
                    self.on_note(payload_of(frame))
                elif call is None:
                    payload_of(frame)  # a late answer to a call given up on: its shared file is removed
                elif kind == Kind.ITEM:
                    self._progressed(call, time.monotonic())
                    assert call.stream is not None
                    call.stream.put_nowait(payload_of(frame))
                elif kind in (Kind.DONE, Kind.FAIL):
                    del self._calls[frame.id]
                    value = payload_of(frame)
                    outcome = value.error() if isinstance(value, Failure) else value
                    self._settle(call, outcome, failed=kind == Kind.FAIL)
        finally:
            await self._closed()

    def _progressed(self, call: _Call, now: float) -> None:
        """A sign of life of a call: its step time goes into the model's average."""
        gap = now - call.last_progress
        self.step_secs = gap if self.step_secs == 0 else 0.8 * self.step_secs + 0.2 * gap
        call.last_progress = now

    def stalled_secs(self) -> float | None:
        """How long the quietest request call has made no progress, when that is a few seconds beyond the model's
        step time (None: every call progresses, or none runs)."""
        now = time.monotonic()
        quiet = [now - call.last_progress for call in self._calls.values() if call.watched]
        if not quiet or max(quiet) <= self.step_secs + STALL_MARGIN_SECS:
            return None
        return round(max(quiet), 1)

    def _settle(self, call: _Call, outcome: Any, failed: bool) -> None:
        if call.stream is not None:
            call.stream.put_nowait(outcome if failed else _END)
        elif call.future is not None and not call.future.done():
            if failed:
                call.future.set_exception(outcome)
            else:
                call.future.set_result(outcome)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer the engine's questions (KV parking) one by one; an error answers None."""
        while (frame := await read_frame(reader)) is not None:
            try:
                answer = self.on_ask(frame.name, payload_of(frame))
                if inspect.isawaitable(answer):
                    answer = await answer
            except Exception:
                logger.exception("answering %s of %s failed", frame.name, self.model_id)
                answer = None
            writer.write(pack(Kind.REPLY, frame.id, "", answer, share_in=self.share))
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    async def _watch(self) -> None:
        process = self.process
        while self.alive:
            await asyncio.sleep(WATCH_SECS)
            now = time.monotonic()
            for call_id, call in list(self._calls.items()):
                if not call.watched:
                    continue
                if call.cancelled_at is not None and now - call.cancelled_at > process.cancel_grace_secs:
                    since = now - call.cancelled_at
                    left = "it ran past stream_timeout_secs" if call.timed_out else "its client left"
                    self.kill(f"a request did not stop within {since:.1f} s after {left}", culprit=call)
                    return
                if now - call.last_progress > self.hang_secs:
                    self.kill(f"a request made no progress for {self.hang_secs:g} s (hung)")
                    return
                bound = self.stream_timeout_secs
                if bound and call.stream is not None and not call.timed_out and now - call.started > bound:
                    self._time_out(call_id, call, bound)
            if self.memory_limit is not None and any(call.watched for call in self._calls.values()):
                self._check_memory(self.memory_limit)

    def _check_memory(self, limit: int) -> None:
        """Kill the host when its resident set is past the wall while it serves: the latest request's failure."""
        if self.proc is None or (rss := rss_bytes(self.proc.pid)) <= limit:
            return
        self.memory_killed = True
        latest = max((call for call in self._calls.values() if call.watched), key=lambda call: call.started)
        self.kill(f"a request took its resident memory to {rss} bytes, past its limit of {limit} bytes", latest)

    def _time_out(self, call_id: int, call: _Call, bound: float) -> None:
        """End a stream that ran past its bound: its reader gets 504 timeout, the engine is asked to stop."""
        call.timed_out = True
        assert call.stream is not None
        message = f"The model `{clip(self.model_id)}` streamed for longer than {bound:g} s (limits.stream_timeout_secs)"
        call.stream.put_nowait(HypnosError(504, "timeout", message))
        self._cancel(call_id)

    def kill(self, reason: str, culprit: _Call | None = None) -> None:
        """Kill the host at once: it hung (a crash of the model), or `culprit` ignored its cancellation (that
        request's own failure, charged to its key)."""
        if self.proc is None or not self.alive:
            return
        self.kill_reason = f"was killed: {reason}"
        self.culprit = culprit
        logger.error("killing the engine host of %s (pid %d): %s", self.model_id, self.proc.pid, reason)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def _gone_error(self) -> HypnosError:
        what = self.kill_reason or "exited"
        return server_error(f"the engine host of `{clip(self.model_id)}` {what}; the model reloads on the next request")

    async def _closed(self) -> None:
        """The socket closed: the host is gone (or going). Fail what was in flight, clean up, tell the owner."""
        if not self.alive:
            return
        self.alive = False
        returncode = await self._reap(2.0)
        reason = self.kill_reason or exit_reason(returncode)
        self.kill_reason = reason
        model = clip(self.model_id)
        error = server_error(f"the engine host of `{model}` {reason}; the model reloads on the next request")
        calls, self._calls = self._calls, {}
        blame = self._blame(list(calls.values()))
        walled = self.memory_limit is not None and self.memory_killed
        for call in calls.values():
            culprit = walled and call is self.culprit
            self._settle(call, memory_limit_error(self.model_id, self.memory_limit or 0) if culprit else error, True)
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        if self._writer is not None:
            self._writer.close()
        shutil.rmtree(self.share, ignore_errors=True)
        self.exited.set()
        if not self.stopping:
            logger.error("the engine host of %s %s", self.model_id, reason)
            self.on_exit(reason, blame)

    def _blame(self, calls: list[_Call]) -> HostBlame:
        """Whom an exit falls on: the culprit's key alone when a request brought the host down by its own fault (or
        every request in flight had been left by its client); else the model, and the keys whose requests ran."""
        if self.culprit is not None:
            return HostBlame(request_fault=True, owners=_owners([self.culprit]))
        running = [call for call in calls if call.watched]
        left = bool(running) and all(call.cancelled_at is not None for call in running)
        return HostBlame(request_fault=left, owners=_owners(running))

    async def _reap(self, wait_secs: float) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        deadline = time.monotonic() + wait_secs
        while (code := proc.poll()) is None and time.monotonic() < deadline:  # noqa: ASYNC110 (no event to await)
            await asyncio.sleep(0.01)
        if code is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            code = await asyncio.to_thread(proc.wait)
        return code

    async def stop(self, grace_secs: float) -> None:
        """End the host: close its socket (it leaves at once), then SIGKILL whatever is left after `grace_secs`."""
        self.stopping = True
        if self.alive and self._writer is not None:
            self._writer.close()
        try:
            await asyncio.wait_for(self.exited.wait(), grace_secs)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                if self.proc is not None:
                    self.proc.kill()
            await self.exited.wait()


def _owners(calls: list[_Call]) -> frozenset[str]:
    return frozenset(call.owner for call in calls if call.owner)
