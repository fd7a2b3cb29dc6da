"""The frames between server and engine host: large payloads travel through a shared file without another copy of
their bytes in the sender's memory, and come back whole."""

from __future__ import annotations

import os
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypnos.hosting.frames import SHARED_BYTES, Kind, decode_frame, pack, payload_of

MiB = 1024 * 1024


@dataclass(frozen=True)
class Found:
    tokens: list[int]
    state: bytes


def _unpack(frame_bytes: bytes) -> tuple[str, object]:
    frame = decode_frame(frame_bytes[4:])
    return frame.shared, payload_of(frame)


@pytest.mark.parametrize(
    "payload",
    [
        ("model", "ns", list(range(5000)), bytearray(os.urandom(3 * MiB)), [], False),
        Found(list(range(100)), os.urandom(2 * MiB)),
        [("slot", b"x" * (SHARED_BYTES + 1))],
        os.urandom(SHARED_BYTES),
    ],
    ids=["a saved state", "a found state", "parked slots", "bare bytes"],
)
def test_a_payload_holding_large_bytes_goes_through_a_shared_file_and_comes_back_whole(
    payload: object, tmp_path: Path
) -> None:
    shared, back = _unpack(pack(Kind.ASK, 7, "pc_save", payload, share_in=tmp_path))
    assert shared and Path(shared).parent == tmp_path
    assert back == payload and type(back) is type(payload)
    assert not list(tmp_path.iterdir())  # the reader removed the file


def test_a_small_payload_stays_in_the_frame(tmp_path: Path) -> None:
    payload = ("model", "ns", list(range(100)), b"tiny", [], False)
    shared, back = _unpack(pack(Kind.ASK, 1, "pc_save", payload, share_in=tmp_path))
    assert shared == "" and back == payload


def test_a_large_payload_of_many_small_items_is_shared_too(tmp_path: Path) -> None:
    payload = [os.urandom(1024) for _ in range(2 * SHARED_BYTES // 1024)]  # no single large buffer, large pickled
    shared, back = _unpack(pack(Kind.ITEM, 2, "", payload, share_in=tmp_path))
    assert shared and back == payload


def test_sending_a_prompt_state_makes_no_copy_of_it_in_memory(tmp_path: Path) -> None:
    """A 32 MiB state sent to the server: pickled straight into the shared file (before, pickling it first made a
    second 32 MiB in the sender, an engine host under its memory limit)."""
    state = bytearray(32 * MiB)
    payload = ("model", "ns", list(range(1000)), state, [], False)
    tracemalloc.start()
    try:
        frame_bytes = pack(Kind.ASK, 3, "pc_save", payload, share_in=tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB
    assert _unpack(frame_bytes)[1] == payload
