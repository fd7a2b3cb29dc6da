"""A batch input read line by line (every bad line an error with its custom_id), and progress files that survive a
write torn by a crash."""

from __future__ import annotations

import json
from pathlib import Path

from hypnos_server.batches.lines import read_input, window_secs
from hypnos_server.batches.store import BatchStore

URL = "/v1/embeddings"


def line(custom_id: str, **change: object) -> bytes:
    request = {"custom_id": custom_id, "method": "POST", "url": URL, "body": {"model": "m", "input": "x"}, **change}
    return json.dumps(request).encode()


def test_each_bad_line_is_an_error_and_the_good_ones_run() -> None:
    data = b"\n".join(
        [line("a"), b"", b"{oops", line("a"), line("b", url="/v1/chat/completions"), line("c", body="text"), line("d")]
    )
    read = read_input(data, URL)
    assert [(good.number, good.custom_id, good.model) for good in read.lines] == [(1, "a", "m"), (7, "d", "m")]
    assert [(bad["custom_id"], bad["error"]["code"]) for bad in read.invalid] == [
        (None, "invalid_json"),
        ("a", "duplicate_custom_id"),
        ("b", "invalid_url"),
        ("c", "invalid_body"),
    ]
    assert [problem["line"] for problem in read.problems] == [3, 4, 5, 6]


def test_deeply_nested_or_binary_lines_are_errors_not_crashes() -> None:
    read = read_input(b"[" * 100_000 + b"\n\xff\xfe\x00\n" + line("ok"), URL)
    assert [good.custom_id for good in read.lines] == ["ok"]
    assert len(read.invalid) == 2


def test_completion_windows() -> None:
    assert window_secs("24h") == 86_400 and window_secs("90s") == 90 and window_secs("2d") == 172_800
    assert window_secs("0h") is None and window_secs("1w") is None and window_secs("24 h") is None


def test_a_torn_last_line_is_cut_off(tmp_path: Path) -> None:
    store = BatchStore(tmp_path)
    path = tmp_path / "progress.jsonl"
    store.append(path, b'{"custom_id": "a"}')
    with path.open("ab") as out:
        out.write(b'{"custom_id": "b", "resp')  # the crash came mid-write
    assert store.finished_lines(path) == [{"custom_id": "a"}]
    store.append(path, b'{"custom_id": "c"}')
    assert [entry["custom_id"] for entry in store.finished_lines(path)] == ["a", "c"]
