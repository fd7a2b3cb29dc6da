"""Thinking on a tiny random GGUF whose template opens a thinking block: random output never closes it, so the
server's cut-off at the budget is what ends the thoughts."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypnos.config import settings_from_mapping
from hypnos.engine import ContentDelta, ReasoningDelta
from hypnos.plugins import make_plugin_manager
from hypnos_llama import plugin as llama_plugin
from hypnos_llama.testing import THINKING_TEMPLATE, chat_request, collect, make_engine, tier1, write_tiny_llama
from litestar.testing import AsyncTestClient


@pytest.fixture(scope="module")
def thinking_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("think") / "thinker.gguf", chat_template=THINKING_TEMPLATE)


@pytest.fixture
async def thinker(thinking_gguf: Path):
    engine = make_engine(thinking_gguf, slots=2, context_len=4096)
    await engine.load(tier1(4096))
    yield engine
    await engine.unload()


def _pieces(events, kind) -> list[str]:
    return [e.text for e in events if isinstance(e, kind)]


async def test_unbounded_thinking_never_ends_on_a_random_model(thinker) -> None:
    text, final, events = await collect(thinker, chat_request("hi", seed=1), max_tokens=24, thinking=True)
    assert _pieces(events, ReasoningDelta) and text == ""
    assert final.finish_reason == "length"


async def test_budget_closes_the_block_and_the_model_answers(thinker) -> None:
    text, final, events = await collect(
        thinker, chat_request("hi", seed=1), max_tokens=64, thinking=True, thinking_budget=6
    )
    kinds = [type(e) for e in events if isinstance(e, (ReasoningDelta, ContentDelta))]
    assert ReasoningDelta in kinds and ContentDelta in kinds
    assert kinds.index(ContentDelta) > max(i for i, k in enumerate(kinds) if k is ReasoningDelta)
    # The worker closes the block right after the budget's last token; without the budget all 64 tokens would
    # be thoughts (test above).
    assert len(_pieces(events, ReasoningDelta)) <= 6 + 1  # the close text starts with a newline
    assert "<think>" not in text and "</think>" not in text
    assert final.completion_tokens > 6


async def test_reasoning_effort_none_closes_at_once(thinker) -> None:
    text, _, events = await collect(thinker, chat_request("hi", seed=1, reasoning_effort="none"), max_tokens=16)
    assert _pieces(events, ReasoningDelta) == [] and text


@pytest.fixture
async def client(thinking_gguf: Path):
    settings = settings_from_mapping(
        {
            "models_dir": str(thinking_gguf.parent),
            "models": [
                {
                    "id": "thinker",
                    "modality": "text_generation",
                    "engine": "ggml_llama",
                    "weights_path": thinking_gguf.name,
                    "slots": 2,
                    "context_len": 4096,
                    "initial_tier": "tier1_gpu_vram",
                    "llama": {"n_threads": 1},
                }
            ],
        }
    )
    from hypnos_server.app import create_app

    app = create_app(settings, make_plugin_manager(autoload=False, plugins=[llama_plugin]))
    async with AsyncTestClient(app) as test_client:
        for _ in range(200):
            if (await test_client.get("/ready")).status_code == 200:
                break
            import asyncio

            await asyncio.sleep(0.05)
        yield test_client


BODY = {
    "model": "thinker",
    "messages": [{"role": "user", "content": "hi"}],
    "seed": 3,
    "max_tokens": 600,
    "reasoning_effort": "low",
}


async def test_low_effort_over_http_splits_thoughts_from_the_answer(client) -> None:
    response = await client.post("/v1/chat/completions", json=BODY)
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"]
    assert "</think>" not in message["content"] and "<think>" not in message["reasoning_content"]
    assert response.json()["usage"]["completion_tokens"] > 512


async def test_low_effort_stream_sends_all_thoughts_before_the_answer(client) -> None:
    response = await client.post("/v1/chat/completions", json={**BODY, "stream": True})
    assert response.status_code == 200
    chunks = [msgspec.json.decode(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    kinds = [
        "r" if d.get("reasoning_content") else "c" for d in deltas if d.get("reasoning_content") or d.get("content")
    ]
    assert "r" in kinds and "c" in kinds and "".join(kinds).find("c") > "".join(kinds).rfind("r")
    assert response.text.rstrip().endswith("data: [DONE]")


async def test_thinking_off_by_default_gives_no_reasoning_content(client) -> None:
    response = await client.post("/v1/chat/completions", json={**BODY, "reasoning_effort": None, "max_tokens": 8})
    assert "reasoning_content" not in response.json()["choices"][0]["message"]
