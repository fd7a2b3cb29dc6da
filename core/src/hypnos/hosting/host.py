"""The engine host: `python -m hypnos.hosting FD ASK_FD` runs one model's engine for the server that started it.

It builds the engine from the factory the server names (the engine object itself never crosses the socket), runs
the calls the server sends, relays cancellations, tells the server which calls reach their cancellation checks
(progress), and exits as soon as the server is gone: the socket closes, and on Linux the kernel sends SIGKILL
(PR_SET_PDEATHSIG) even while the engine is stuck in native code.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypnos.config import LimitsConfig, ModelConfig
from hypnos.cpu_cores import pin_process
from hypnos.engine import CachedPrompt, CancelToken, Engine, EngineContext, ParkedSlot, SavedState, method_table
from hypnos.engine_methods import LIFECYCLE_METHODS
from hypnos.errors import HypnosError, clip, server_error
from hypnos.hosting.frames import Failure, Kind, decode_frame, failure_of, pack, payload_of, read_frame
from hypnos.hosting.memory_wall import memory_limit_error, take_data_limit
from hypnos.image_header import image_bomb_error, limit_image_decoders
from hypnos.kit.device_oom import out_of_memory

logger = logging.getLogger("hypnos.hosting.host")

PROGRESS_SECS = 0.5  # how often the host reports which calls made progress
PR_SET_PDEATHSIG = 1
HOST_ENV = "HYPNOS_ENGINE_HOST"  # set in every engine host (the model id): code may tell it runs in one
HOST_NICE_ENV = "HYPNOS_HOST_NICE"  # the niceness the host takes over the server's ([models.process] nice)


@dataclass
class HostStart:
    """What the server sends first: the model, the engine factory's import path and the engine context's facts."""

    model: ModelConfig
    factory: str  # "module:qualname"
    models_dir: str
    limits: LimitsConfig
    accelerator: str
    kv_idle_timeout_secs: int | None
    options: dict[str, Any]
    share_dir: str
    kv_park: bool = True  # whether the server offers KV parking
    prompt_cache: bool = False  # whether the server offers a prompt cache
    cache_dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # the request methods the host serves, name -> streams (the core's and the kind's own); None: the core's
    methods: dict[str, bool] | None = None


def resolve_factory(path: str) -> Callable[..., Engine]:
    """The engine factory named `module:qualname`."""
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    factory: Callable[..., Engine] = target
    return factory


class AskChannel:
    """The engine's synchronous questions to the server (KV parking), from any thread, one at a time."""

    def __init__(self, sock: socket.socket, share_dir: Path) -> None:
        self._sock, self._share, self._lock = sock, share_dir, threading.Lock()
        self._file = sock.makefile("rb")

    def ask(self, name: str, payload: Any) -> Any:
        """Send a question and wait for its answer (raises when the server is gone)."""
        with self._lock:
            self._sock.sendall(pack(Kind.ASK, 0, name, payload, share_in=self._share))
            head = self._file.read(4)
            if len(head) < 4:
                raise ConnectionError("the server is gone")
            return payload_of(decode_frame(self._file.read(int.from_bytes(head, "big"))))


class RemoteKvPark:
    """The server's KV parking store, asked through the ask channel (engines call it from their worker threads)."""

    def __init__(self, channel: AskChannel) -> None:
        self._channel = channel

    @property
    def enabled(self) -> bool:
        """Whether parking is on at the server now."""
        return bool(self._channel.ask("kv_enabled", None))

    def park(self, model_id: str, layout: Hashable, slots: list[ParkedSlot]) -> bool:
        """Park the slots at the server (their states travel through shared memory)."""
        return bool(self._channel.ask("kv_park", (model_id, layout, slots)))

    def take(self, model_id: str, layout: Hashable) -> list[ParkedSlot]:
        """The model's parked slots, removed from the server's store."""
        return list(self._channel.ask("kv_take", (model_id, layout)) or [])


class RemotePromptCache:
    """The server's prompt cache, asked through the ask channel (states travel through shared memory)."""

    def __init__(self, channel: AskChannel) -> None:
        self._channel = channel

    def save(
        self,
        model_id: str,
        namespace: str,
        tokens: list[int],
        state: SavedState,
        files: list[str],
        parked: bool = False,
    ) -> bool:
        """Save a prompt state at the server."""
        return bool(self._channel.ask("pc_save", (model_id, namespace, tokens, state, files, parked)))

    def unpark(self, model_id: str) -> None:
        """Turn the model's parked states at the server into ordinary ones."""
        self._channel.ask("pc_unpark", (model_id,))

    def lookup(self, model_id: str, namespace: str, tokens: list[int], longer_than: int) -> CachedPrompt | None:
        """The server's saved state with the longest shared block prefix, when longer than `longer_than`."""
        found = self._channel.ask("pc_lookup", (model_id, namespace, tokens, longer_than))
        return found if isinstance(found, CachedPrompt) else None


class WatchedToken(CancelToken):
    """A cancellation token that remembers being checked: a check is the engine's proof of progress."""

    def __init__(self) -> None:
        super().__init__()
        self.checked = False

    @property
    def cancelled(self) -> bool:
        """True once cancelled; every read counts as progress."""
        self.checked = True
        return self._event.is_set()


class EngineHost:
    """Serves one engine over the server's socket until the server closes it."""

    def __init__(self, main: socket.socket, ask: socket.socket) -> None:
        self._main, self._ask_sock = main, ask
        self.engine: Engine | None = None
        self.calls: dict[int, WatchedToken] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._share = Path(".")
        self._tasks: set[asyncio.Task[None]] = set()
        self.methods = {method.name: method.streams for method in method_table().values()}  # name -> streams
        self.data_limit: int | None = None  # the RLIMIT_DATA this host took (its memory wall)
        self.max_image_pixels = LimitsConfig().max_image_pixels

    async def serve(self) -> None:
        """Read frames until the server goes away, then leave at once (the server owns this process's life)."""
        reader, self._writer = await asyncio.open_connection(sock=self._main)
        progress = asyncio.create_task(self._report_progress())
        try:
            while (frame := await read_frame(reader)) is not None:
                if frame.kind == Kind.CALL:
                    task = asyncio.create_task(self._run(frame.id, frame.name, payload_of(frame)))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif frame.kind == Kind.CANCEL and frame.id in self.calls:
                    self.calls[frame.id].cancel()
        finally:
            progress.cancel()
        os._exit(0)  # the server closed the socket: nothing here is worth a clean shutdown

    def _send(self, kind: Kind, call_id: int, payload: Any = None) -> None:
        assert self._writer is not None
        self._writer.write(pack(kind, call_id, "", payload, share_in=self._share))

    async def _report_progress(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_SECS)
            moved = [call_id for call_id, token in self.calls.items() if token.checked]
            for call_id in moved:
                self.calls[call_id].checked = False
            if moved:
                self._send(Kind.PROGRESS, 0, moved)

    async def _follow_cores(self, args: tuple[Any, ...]) -> Any:
        """Pin the host's threads to the share and tell the engine: a wider share is pinned before the engine hears
        of it, a narrower one after the engine follows it (a step in flight never has more threads than cores)."""
        narrower = hasattr(os, "sched_getaffinity") and len(args[0]) < len(os.sched_getaffinity(0))
        if not narrower:
            pin_process(args[0])
        try:
            return await self.engine.follow_cores(*args) if self.engine is not None else None
        finally:
            if narrower:
                pin_process(args[0])

    async def _run(self, call_id: int, name: str, args: tuple[Any, ...]) -> None:
        token = WatchedToken()
        self.calls[call_id] = token
        try:
            if name == "start":
                self._start(args[0])
                result: Any = None
            elif name == "follow_cores":
                result = await self._follow_cores(args)
            elif name in LIFECYCLE_METHODS:
                result = getattr(self.engine, name)(*args)
                if asyncio.iscoroutine(result):
                    result = await result
            elif name not in self.methods:
                raise server_error(f"the engine host serves no method `{clip(name)}`")
            elif self.methods[name]:
                async for item in getattr(self.engine, name)(*args, token):
                    self._send(Kind.ITEM, call_id, item)
                    token.checked = True
                    if self._writer is not None:
                        await self._writer.drain()
                result = None
            else:
                result = await getattr(self.engine, name)(*args, token)
            self._send(Kind.DONE, call_id, result)
        except HypnosError as error:
            self._send(Kind.FAIL, call_id, failure_of(error))
        except Exception as error:
            failure: Failure
            model_id = self.engine.model.id if self.engine is not None else "?"
            request_error = image_bomb_error(error, self.max_image_pixels)
            serving = name not in LIFECYCLE_METHODS and name != "start"
            if request_error is None and serving and isinstance(error, MemoryError) and self.data_limit is not None:
                request_error = memory_limit_error(model_id, self.data_limit)  # the wall: this request's failure
            if request_error is not None:
                logger.warning("the engine's %s refused a request: %s", name, request_error.message)
                failure = failure_of(request_error)
            elif self.engine is not None and self.engine.device_oom(error):  # the library's own OOM: 507, retried
                logger.warning("the engine's %s ran out of device memory: %s", name, error)
                failure = failure_of(out_of_memory(self.engine.model.id, error))
            else:
                logger.exception("the engine's %s failed", name)
                message = (
                    f"the engine of `{clip(model_id)}` failed while serving {name}; the server log has the details"
                )
                failure = failure_of(server_error(message))
            self._send(Kind.FAIL, call_id, failure)
        finally:
            self.calls.pop(call_id, None)
        if self._writer is not None:
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    def _start(self, start: HostStart) -> None:
        self._share = Path(start.share_dir)
        if start.methods is not None:
            self.methods = dict(start.methods)
        self.max_image_pixels = start.limits.max_image_pixels
        limit_image_decoders(start.limits.max_image_pixels)  # whatever decodes an image in this host
        channel = AskChannel(self._ask_sock, self._share)
        loop = asyncio.get_running_loop()

        def threads_changed(model_id: str, threads: int) -> None:  # from the engine's threads: sent from the loop's
            loop.call_soon_threadsafe(self._send, Kind.NOTE, 0, ("threads", model_id, threads))

        context = EngineContext(
            models_dir=Path(start.models_dir),
            limits=start.limits,
            accelerator=start.accelerator,
            cache_dir=Path(start.cache_dir) if start.cache_dir else None,
            extra=start.extra,
            kv_park=RemoteKvPark(channel) if start.kv_park else None,
            prompt_cache=RemotePromptCache(channel) if start.prompt_cache else None,
            context_resized=lambda model_id, cells: self._send(Kind.NOTE, 0, ("context_resized", model_id, cells)),
            kv_idle_timeout_secs=start.kv_idle_timeout_secs,
            threads_changed=threads_changed,
            options={start.model.id: start.options},
        )
        self.engine = resolve_factory(start.factory)(start.model, context)


def tie_to_server() -> None:
    """SIGKILL this process when the server that started it dies (Linux), even mid native call."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def take_niceness(value: str) -> None:
    """Lower (or, with privileges, raise) this process's CPU priority by the configured niceness. A niced host (a
    batch engine's) also takes Linux's SCHED_IDLE policy: it runs on what the other programs leave idle. Niceness
    alone still gives each of its threads a tenth of a core beside a decode thread, and a decode's threads wait for
    the slowest of them at every layer: a converter's six threads took a third of the core they shared with one."""
    try:
        wanted = int(value)
        if wanted:
            os.nice(wanted)
    except (ValueError, OSError) as error:  # a negative niceness without CAP_SYS_NICE: keep the server's
        logger.warning("could not take niceness %s: %s", value, error)
        return
    if wanted > 0 and hasattr(os, "SCHED_IDLE"):  # set before the engine starts threads: they inherit it
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def main(argv: list[str]) -> None:
    """Entry point of a host process: the two inherited socket descriptors in argv."""
    tie_to_server()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the server's terminal is the server's to handle
    logging.basicConfig(
        level=os.environ.get("HYPNOS_HOST_LOG_LEVEL", "WARNING"),
        format=f"%(asctime)s engine-host[{os.environ.get(HOST_ENV, '?')}] %(levelname)s %(name)s: %(message)s",
    )
    take_niceness(os.environ.get(HOST_NICE_ENV, "0"))
    main_sock = socket.socket(fileno=int(argv[1]))
    ask_sock = socket.socket(fileno=int(argv[2]))
    ask_sock.setblocking(True)
    host = EngineHost(main_sock, ask_sock)
    host.data_limit = take_data_limit()
    asyncio.run(host.serve())
