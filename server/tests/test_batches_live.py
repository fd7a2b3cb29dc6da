"""The Files and Batches APIs against the real server (granian, fake engines): hostile inputs get 4xx or per-line
errors, a key never reaches another's files or batches, an interactive request takes a batch line's slot, and a
cancelled or expired batch ends with what it finished."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypnos_server.testing import live_process

CONFIG = """
[server]
files_max_bytes = 60000
batch_max_concurrent_lines = 2

[[server.keys]]
key = "alice-key"
label = "alice"

[[server.keys]]
key = "bob-key"
label = "bob"

[[models]]
id = "chat"
modality = "text_generation"
engine = "fake"

[[models]]
id = "slow-chat"
modality = "text_generation"
engine = "fake"
slots = 1
[models.fake]
tokens = 30
token_ms = 40

[[models]]
id = "pair-chat"
modality = "text_generation"
engine = "fake"
slots = 2
[models.fake]
tokens = 20
token_ms = 40
"""
ENV = {"HYPNOS_PLUGINS": "fake"}
ENDED = ("completed", "failed", "expired", "cancelled")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("batches") / "hypnos.toml"
    config.write_text(CONFIG)
    with live_process(config, env=ENV, ready_timeout=60) as (_, url):
        yield url


def sdk(base: str, key: str = "alice-key") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)


def chat_line(custom_id: str, text: str, model: str = "chat") -> str:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body})


def wait_ended(api: openai.OpenAI, batch_id: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = api.batches.retrieve(batch_id)
        if batch.status in ENDED or time.monotonic() > deadline:
            return batch
        time.sleep(0.1)


def lines_of(api: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(line) for line in api.files.content(file_id).text.splitlines()]


def start(api: openai.OpenAI, text: str, window: str = "24h") -> Any:
    upload = api.files.create(file=("in.jsonl", text.encode()), purpose="batch")
    return api.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window=window)


def test_bad_lines_go_to_the_error_file_with_their_custom_id(base: str) -> None:
    api = sdk(base)
    wrong_url = json.dumps({"custom_id": "wrong-url", "method": "POST", "url": "/v1/embeddings", "body": {}})
    streamed = json.loads(chat_line("streamed", "hi"))
    streamed["body"]["stream"] = True
    text = "\n".join(
        [
            chat_line("good-1", "hello there"),
            "{not json",
            json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}),
            chat_line("good-1", "the same id again"),
            wrong_url,
            json.dumps({"custom_id": "no-body", "method": "POST", "url": "/v1/chat/completions", "body": [1]}),
            json.dumps(streamed),
            chat_line("unknown-model", "hi", model="nope"),
            "",
            chat_line("good-2", "bye"),
            "[1, 2]",
        ]
    )
    batch = wait_ended(api, start(api, text).id)
    assert batch.status == "completed"
    assert batch.request_counts.model_dump() == {"total": 10, "completed": 2, "failed": 8}
    assert {error.line for error in batch.errors.data} == {2, 3, 4, 5, 6, 7, 11}
    errors = lines_of(api, batch.error_file_id)
    codes = {(line["custom_id"], (line["error"] or {}).get("code")) for line in errors}
    assert ("good-1", "duplicate_custom_id") in codes
    assert ("wrong-url", "invalid_url") in codes and ("no-body", "invalid_body") in codes
    assert ("streamed", "invalid_body") in codes and (None, "invalid_json") in codes
    unknown = next(line for line in errors if line["custom_id"] == "unknown-model")
    assert unknown["response"]["status_code"] == 404  # the route's own answer to that request
    assert unknown["response"]["body"]["error"]["type"] == "model_not_found"
    assert sorted(line["custom_id"] for line in lines_of(api, batch.output_file_id)) == ["good-1", "good-2"]


def test_a_key_never_reaches_another_keys_files_or_batches(base: str) -> None:
    alice, bob = sdk(base), sdk(base, "bob-key")
    upload = alice.files.create(file=("a.jsonl", chat_line("x", "hi").encode()), purpose="batch")
    batch = alice.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="1h")
    for call in (
        lambda: bob.files.retrieve(upload.id),
        lambda: bob.files.content(upload.id),
        lambda: bob.files.delete(upload.id),
        lambda: bob.batches.retrieve(batch.id),
        lambda: bob.batches.cancel(batch.id),
        lambda: bob.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="1h"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert upload.id not in {f.id for f in bob.files.list()}
    assert batch.id not in {b.id for b in bob.batches.list()}
    assert wait_ended(alice, batch.id).status == "completed"


def test_refused_requests_are_4xx(base: str) -> None:
    api = sdk(base)
    upload = api.files.create(file=("a.jsonl", chat_line("x", "hi").encode()), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        api.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        api.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="soon")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        api.files.create(file=("a.jsonl", b"{}"), purpose="fine-tune")
    with pytest.raises(openai.APIStatusError) as too_big:
        api.files.create(file=("big.jsonl", b"x" * 70000), purpose="batch")
    assert too_big.value.status_code == 413
    with pytest.raises(openai.NotFoundError):
        api.batches.create(input_file_id="file-0000", endpoint="/v1/chat/completions", completion_window="24h")
    bad = httpx.post(f"{base}/v1/files", headers={"authorization": "Bearer alice-key"}, json={"purpose": "batch"})
    assert bad.status_code == 400


def test_the_quota_per_key(tmp_path: Path) -> None:
    config = tmp_path / "hypnos.toml"
    config.write_text('[server]\nfiles_max_bytes = 6000\nfiles_quota_bytes = 12000\napi_keys = ["k1", "k2"]\n')
    with live_process(config, env=ENV, ready_timeout=60) as (_, url):
        one, two = sdk(url, "k1"), sdk(url, "k2")
        kept = [one.files.create(file=(f"{i}.jsonl", b"y" * 5000), purpose="batch") for i in range(2)]
        with pytest.raises(openai.APIStatusError) as over:
            one.files.create(file=("third.jsonl", b"y" * 5000), purpose="batch")
        assert over.value.status_code == 413 and "files_quota_bytes" in over.value.message
        assert two.files.create(file=("other.jsonl", b"y" * 5000), purpose="batch").bytes == 5000  # its own quota
        one.files.delete(kept[0].id)
        one.files.create(file=("third.jsonl", b"y" * 5000), purpose="batch")  # room again


def test_a_gigabyte_upload_is_refused_before_it_is_read(base: str) -> None:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(
            b"POST /v1/files HTTP/1.1\r\nhost: x\r\nauthorization: Bearer bob-key\r\n"
            b"content-type: multipart/form-data; boundary=b\r\ncontent-length: 1073741824\r\n\r\n--b\r\n"
        )
        assert conn.recv(64).startswith(b"HTTP/1.1 413")


def test_an_interactive_request_takes_the_slot_of_a_batch_line(base: str) -> None:
    api = sdk(base)
    text = "\n".join(chat_line(f"slow-{i}", f"slow question {i}", model="slow-chat") for i in range(4))
    batch = start(api, text)
    deadline = time.monotonic() + 30
    while api.batches.retrieve(batch.id).status != "in_progress" and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # a line holds the model's only slot now
    answer = api.chat.completions.create(model="slow-chat", messages=[{"role": "user", "content": "me first"}])
    assert answer.choices[0].finish_reason == "stop"
    assert api.batches.retrieve(batch.id).status == "in_progress"  # answered while the batch still runs
    ended = wait_ended(api, batch.id)
    assert ended.status == "completed" and ended.request_counts.completed == 4
    for line in lines_of(api, ended.output_file_id):  # the line that yielded ran again, whole
        body = line["response"]["body"]
        assert body["choices"][0]["finish_reason"] == "stop" and body["usage"]["completion_tokens"] == 30
    metrics = httpx.get(f"{base}/metrics").text
    yields = next(row for row in metrics.splitlines() if row.startswith("hypnos_batch_yields_total"))
    assert float(yields.split()[-1]) >= 1


def yields(base: str) -> float:
    metrics = httpx.get(f"{base}/metrics").text
    return float(next(row for row in metrics.splitlines() if row.startswith("hypnos_batch_yields_total")).split()[-1])


def test_batch_lines_leave_a_slot_to_a_model_in_interactive_use(base: str) -> None:
    api = sdk(base)
    question = [{"role": "user", "content": "me first"}]
    api.chat.completions.create(model="pair-chat", messages=question)  # the model is in interactive use
    before = yields(base)
    batch = start(api, "\n".join(chat_line(f"pair-{i}", f"pair question {i}", model="pair-chat") for i in range(6)))
    while api.batches.retrieve(batch.id).status != "in_progress":
        time.sleep(0.05)
    time.sleep(0.3)  # two lines run at once (batch_max_concurrent_lines), the model has two slots
    for _ in range(3):  # each takes the slot the batch leaves free: no line had to give its slot back
        answer = api.chat.completions.create(model="pair-chat", messages=question)
        assert answer.choices[0].finish_reason == "stop"
        assert api.batches.retrieve(batch.id).status == "in_progress"
    ended = wait_ended(api, batch.id)
    assert ended.status == "completed" and ended.request_counts.completed == 6
    assert sorted(line["custom_id"] for line in lines_of(api, ended.output_file_id)) == [f"pair-{i}" for i in range(6)]
    assert yields(base) == before


def test_cancel_and_expiry_end_with_what_finished(base: str) -> None:
    api = sdk(base)
    text = "\n".join(chat_line(f"c{i}", f"to cancel {i}", model="slow-chat") for i in range(6))
    batch = start(api, text)
    while api.batches.retrieve(batch.id).request_counts.completed < 1:
        time.sleep(0.05)
    cancelling = api.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    ended = wait_ended(api, batch.id)
    assert ended.status == "cancelled" and ended.cancelled_at is not None
    counts = ended.request_counts
    assert counts.total == 6 and counts.completed >= 1 and counts.completed + counts.failed == 6
    assert {line["error"]["code"] for line in lines_of(api, ended.error_file_id)} == {"batch_cancelled"}
    assert api.batches.cancel(batch.id).status == "cancelled"  # an ended batch stays as it is

    expiring = start(api, "\n".join(chat_line(f"x{i}", f"late {i}", model="slow-chat") for i in range(20)), "2s")
    ended = wait_ended(api, expiring.id)
    assert ended.status == "expired" and ended.expired_at is not None
    assert ended.request_counts.completed + ended.request_counts.failed == 20
    assert ended.request_counts.completed < 20
    expired = [line for line in lines_of(api, ended.error_file_id) if line["error"]["code"] == "batch_expired"]
    assert len(expired) == ended.request_counts.failed


def test_polling_a_running_batch_never_fails(base: str) -> None:
    """Reading the batch while it validates and runs never fails (the live record is shared, not torn)."""
    api = sdk(base)
    batch = start(api, "\n".join(chat_line(f"r{i}", f"read {i}") for i in range(50)))  # about 5.5 kB
    seen: list[str] = []

    def poll() -> None:
        while True:
            status = api.batches.retrieve(batch.id).status
            seen.append(status)
            if status in ENDED:
                return

    reader = threading.Thread(target=poll)
    reader.start()
    reader.join(60)
    assert seen[-1] == "completed"
    assert set(seen) <= {"validating", "in_progress", "finalizing", "completed"}
