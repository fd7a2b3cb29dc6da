"""End to end: the Files and Batches APIs through the OpenAI SDK against the real `hypnos serve` (fake engines): a
chat and an embeddings batch answer as the same requests sent one by one, and a batch killed with -9 midway resumes
after the restart with every line answered exactly once."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import openai
from hypnos_server.testing import live_process

API_KEY = "batch-key"
ENV = {"HYPNOS_API_KEYS": API_KEY, "HYPNOS_PLUGINS": "fake"}
CONFIG = """
[server]
request_log_capacity = 2000

[[models]]
id = "chat"
modality = "text_generation"
engine = "fake"
slots = 4
[models.fake]
tokens = 12

[[models]]
id = "embed"
modality = "embeddings"
engine = "fake"

[[models]]
id = "slow-chat"
modality = "text_generation"
engine = "fake"
[models.fake]
tokens = 10
token_ms = 30
"""
ENDED = ("completed", "failed", "expired", "cancelled")


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=60)


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


def chat_lines(count: int, model: str = "chat") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"chat-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "temperature": 0, "messages": [{"role": "user", "content": f"question {i}"}]},
        }
        for i in range(count)
    ]


def wait_ended(api: openai.OpenAI, batch_id: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = api.batches.retrieve(batch_id)
        if batch.status in ENDED or time.monotonic() > deadline:
            return batch
        time.sleep(0.2)


def results(api: openai.OpenAI, file_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in api.files.content(file_id).text.splitlines()]


def test_chat_and_embeddings_batches_answer_as_one_by_one(tmp_path: Path) -> None:
    config = tmp_path / "hypnos.toml"
    config.write_text(CONFIG)
    with live_process(config, env=ENV, ready_timeout=60) as (_, base):
        api = sdk(base)
        chats = chat_lines(40)
        embeds = [
            {
                "custom_id": f"e{i}",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": "embed", "input": str(i), "encoding_format": "float"},
            }
            for i in range(300)
        ]
        chat_file = api.files.create(file=("chat.jsonl", jsonl(chats)), purpose="batch")
        embed_file = api.files.create(file=("embed.jsonl", jsonl(embeds)), purpose="batch")
        assert chat_file.purpose == "batch" and chat_file.bytes == len(jsonl(chats))
        assert api.files.content(chat_file.id).content == jsonl(chats)
        chat_batch = api.batches.create(
            input_file_id=chat_file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        embed_batch = api.batches.create(
            input_file_id=embed_file.id, endpoint="/v1/embeddings", completion_window="24h", metadata={"run": "1"}
        )
        assert chat_batch.status == "validating"
        chat_batch, embed_batch = wait_ended(api, chat_batch.id), wait_ended(api, embed_batch.id)
        assert chat_batch.status == "completed", chat_batch
        assert chat_batch.request_counts.model_dump() == {"total": 40, "completed": 40, "failed": 0}
        assert embed_batch.status == "completed" and embed_batch.request_counts.completed == 300
        assert embed_batch.metadata == {"run": "1"}
        assert chat_batch.error_file_id is None and chat_batch.completed_at is not None

        answered = {line["custom_id"]: line for line in results(api, chat_batch.output_file_id)}
        assert sorted(answered) == sorted(line["custom_id"] for line in chats)
        for line in chats:
            alone = api.chat.completions.create(**line["body"])
            response = answered[line["custom_id"]]["response"]
            assert response["status_code"] == 200
            assert response["body"]["choices"][0]["message"]["content"] == alone.choices[0].message.content
        vectors = {line["custom_id"]: line["response"]["body"] for line in results(api, embed_batch.output_file_id)}
        assert len(vectors) == 300
        for line in embeds[::30]:
            alone = api.embeddings.create(**line["body"])
            assert vectors[line["custom_id"]]["data"][0]["embedding"] == alone.data[0].embedding

        output = api.files.retrieve(chat_batch.output_file_id)
        assert output.purpose == "batch_output"
        assert {f.id for f in api.files.list(purpose="batch_output")} >= {output.id, embed_batch.output_file_id}
        assert [b.id for b in api.batches.list()][:2] == [embed_batch.id, chat_batch.id]

        auth = {"authorization": f"Bearer {API_KEY}"}
        logs = httpx.get(f"{base}/v1/logs", params={"limit": 500}, headers=auth).json()["records"]
        marked = [record["batch"] for record in logs if "batch" in record]
        assert f"{chat_batch.id}/chat-0" in marked
        metrics = httpx.get(f"{base}/metrics").text
        assert 'hypnos_batch_lines_total{endpoint="/v1/embeddings",outcome="completed"} 300.0' in metrics
        assert 'hypnos_batch_jobs{status="completed"} 2.0' in metrics
        assert api.files.delete(chat_file.id).deleted
        assert chat_file.id not in {f.id for f in api.files.list()}


def test_a_batch_killed_midway_resumes_with_every_line_answered_once(tmp_path: Path) -> None:
    config = tmp_path / "hypnos.toml"
    config.write_text(CONFIG)
    lines = chat_lines(30, model="slow-chat")
    with live_process(config, env=ENV, ready_timeout=60) as (process, base):
        api = sdk(base)
        upload = api.files.create(file=("slow.jsonl", jsonl(lines)), purpose="batch")
        batch = api.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="1h")
        deadline = time.monotonic() + 60
        while api.batches.retrieve(batch.id).request_counts.completed < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = api.batches.retrieve(batch.id)
        assert before.status == "in_progress" and 5 <= before.request_counts.completed < 30
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    with live_process(config, env=ENV, ready_timeout=60) as (_, base):
        api = sdk(base)
        ended = wait_ended(api, batch.id)
        assert ended.status == "completed", ended
        assert ended.request_counts.model_dump() == {"total": 30, "completed": 30, "failed": 0}
        answered = [line["custom_id"] for line in results(api, ended.output_file_id)]
        assert sorted(answered) == sorted(line["custom_id"] for line in lines)  # each once, none twice
        first = results(api, ended.output_file_id)[0]
        alone = api.chat.completions.create(**next(x["body"] for x in lines if x["custom_id"] == first["custom_id"]))
        assert first["response"]["body"]["choices"][0]["message"]["content"] == alone.choices[0].message.content
