"""The fake engine's deterministic outputs: its token pace, words from a prompt, a tool call, a PNG."""

from __future__ import annotations

import asyncio
import hashlib
import struct
import time
import zlib

import msgspec

from hypnos.chat import ChatInput
from hypnos.openai import ToolCall, ToolCallFunction


class Pace:
    """Steps of `ms` each at a fixed rate, as an engine's compute runs: a sleep that wakes late (epoll rounds a
    timeout up to the next millisecond each time something else wakes the loop mid-sleep, as a Ray actor's I/O does)
    shortens the next step (by up to one step) instead of slowing the engine down."""

    def __init__(self, ms: float) -> None:
        self.step = ms / 1000.0
        self.due: float | None = None

    async def tick(self) -> None:
        """Wait for the end of the next step (at least one pass of the loop)."""
        if not self.step:
            await asyncio.sleep(0)
            return
        now = time.perf_counter()
        self.due = (now if self.due is None else max(self.due, now - self.step)) + self.step
        await asyncio.sleep(max(0.0, self.due - now))


def prompt_words(seed_text: str, count: int) -> list[str]:
    """A deterministic word sequence derived from the prompt text."""
    vocabulary = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    digest = hashlib.sha256(seed_text.encode()).digest()
    return [vocabulary[digest[i % len(digest)] % len(vocabulary)] for i in range(count)]


def tool_call(request: ChatInput) -> ToolCall | None:
    """A call of the named (or first) tool with the last user text as `query`, unless a tool result came last."""
    if not request.wants_tools or request.messages[-1].role == "tool":
        return None
    name = request.forced_tool or request.tools[0].function.name
    arguments = msgspec.json.encode({"query": request.messages[-1].text()}).decode()
    return ToolCall(
        id=f"call_{hashlib.sha256(arguments.encode()).hexdigest()[:8]}_0",
        function=ToolCallFunction(name=name, arguments=arguments),
    )


def png(width: int, height: int, seed: int) -> bytes:
    """A valid single-colour RGB PNG."""
    colour = bytes([seed % 256, (seed // 7) % 256, (seed // 13) % 256])
    raw = b"".join(b"\x00" + colour * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
