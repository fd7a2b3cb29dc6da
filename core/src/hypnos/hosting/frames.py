"""The frames a server and an engine host exchange over their socket: msgspec envelopes, payloads beside them.

A frame is a 4-byte big-endian length and a msgpack `Frame`. The payload (a call's arguments, a result, a stream
item) is pickled; past `SHARED_BYTES` it travels through a shared-memory file (tmpfs) named in the frame instead of
through the socket, so a large image, audio file or parked KV state is written once and read once by the reader.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import struct
import tempfile
from enum import IntEnum
from pathlib import Path
from typing import Any

import msgspec

from hypnos.engine import DeviceOutOfMemory
from hypnos.errors import HypnosError

SHARED_BYTES = 1024 * 1024  # payloads from this size go through shared memory
SCANNED_ITEMS = 64  # a longer sequence (a prompt's tokens) is not looked into for large bytes
MAX_FRAME_BYTES = 64 * 1024 * 1024  # an envelope (payloads this size are shared, never framed)
_LENGTH = struct.Struct(">I")


class Kind(IntEnum):
    """What a frame is."""

    CALL = 1  # server -> host: run `name` with the payload's arguments (id: the call)
    ITEM = 2  # host -> server: one item of a streamed call
    DONE = 3  # host -> server: the call's result (a stream: its end)
    FAIL = 4  # host -> server: the call failed with the payload's Failure
    CANCEL = 5  # server -> host: the call's client went away
    PROGRESS = 6  # host -> server: the calls in the payload (ids) reached a cancellation check or made an item
    ASK = 7  # host -> server: the engine asks the server (KV parking); answered with REPLY of the same id
    REPLY = 8  # server -> host: the answer to an ASK
    NOTE = 9  # host -> server: a one-way notice (the context grew)


class Frame(msgspec.Struct, array_like=True):
    """One message between server and host; `data` is the pickled payload unless `shared` names its file."""

    kind: int
    id: int = 0
    name: str = ""
    data: bytes = b""
    shared: str = ""


class Failure(msgspec.Struct, kw_only=True):
    """A HypnosError carried as data, rebuilt on the other side as the same error (DeviceOutOfMemory included)."""

    status: int
    type: str
    message: str
    retry_after: int | None = None
    code: str | None = None
    oom: bool = False

    def error(self) -> HypnosError:
        """The HypnosError this stands for."""
        if self.oom:
            return DeviceOutOfMemory(self.message)
        return HypnosError(self.status, self.type, self.message, retry_after=self.retry_after, code=self.code)


def failure_of(error: HypnosError) -> Failure:
    """The Failure standing for a HypnosError."""
    return Failure(
        status=error.status,
        type=error.type,
        message=error.message,
        retry_after=error.retry_after,
        code=error.code,
        oom=isinstance(error, DeviceOutOfMemory),
    )


def shared_dir() -> Path:
    """Where shared payload files live: tmpfs (/dev/shm) when the machine has it."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Frame)


def pack(kind: Kind, call_id: int = 0, name: str = "", payload: Any = None, *, share_in: Path | None = None) -> bytes:
    """The bytes of one frame; a payload of SHARED_BYTES or more goes to a file in `share_in` when given (pickled
    straight into it when it holds a large buffer: a prompt state is not copied once more in memory)."""
    shared = ""
    if share_in is not None and _holds_large_buffer(payload):
        data, shared = b"", _dump_shared(share_in, payload)
    else:
        data = b"" if payload is None else pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        if share_in is not None and len(data) >= SHARED_BYTES:
            shared = _write_shared(share_in, data)
            data = b""
    body = _encoder.encode(Frame(int(kind), call_id, name, data, shared))
    return _LENGTH.pack(len(body)) + body


def _holds_large_buffer(payload: Any, depth: int = 3) -> bool:
    """True when the payload is bytes of SHARED_BYTES or more, or holds such bytes a few levels down (in a short
    tuple or list, or a dataclass: a prompt state in its call, a found state, parked slots)."""
    if isinstance(payload, (bytes, bytearray)):
        return len(payload) >= SHARED_BYTES
    if depth == 0:
        return False
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        items: Any = [getattr(payload, field.name) for field in dataclasses.fields(payload)]
    elif isinstance(payload, (tuple, list)) and len(payload) <= SCANNED_ITEMS:
        items = payload
    else:
        return False
    return any(_holds_large_buffer(item, depth - 1) for item in items)


def _dump_shared(folder: Path, payload: Any) -> str:
    """Pickle a payload into a new file in `folder` (large buffers are written from where they lie); its path."""
    descriptor, path = tempfile.mkstemp(prefix="payload-", dir=folder)
    try:
        with open(descriptor, "wb") as handle:
            pickle.dump(payload, handle, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:
        os.unlink(path)
        raise
    return path


def _write_shared(folder: Path, data: bytes) -> str:
    descriptor, path = tempfile.mkstemp(prefix="payload-", dir=folder)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)
    return path


def payload_of(frame: Frame) -> Any:
    """The frame's payload (None when it has none), read from its shared file (then removed) when it has one."""
    if frame.shared:
        path = frame.shared
        try:
            with open(path, "rb") as handle:  # read, not mapped: mapped pages would count twice in the reader's RSS
                return pickle.load(handle)
        finally:
            os.unlink(path)
    return pickle.loads(frame.data) if frame.data else None


def decode_frame(body: bytes) -> Frame:
    """A frame from its bytes (without the length)."""
    return _decoder.decode(body)


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None when the other side closed the socket."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        (length,) = _LENGTH.unpack(head)
        if length > MAX_FRAME_BYTES:
            raise ValueError(f"a frame of {length} bytes")
        return _decoder.decode(await reader.readexactly(length))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
