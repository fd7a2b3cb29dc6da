"""A client that hangs up on /v1/embeddings (real MiniLM, real server) cancels the work and frees the model."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from hypnos_llama.testing import toml_model_config
from hypnos_server.testing import live_server, raw_post

pytestmark = pytest.mark.model

INPUTS = 1200  # about 46 s of work on two busy cores when nothing cancels it


def status(base: str) -> dict:
    models = httpx.get(f"{base}/v1/memory/status", timeout=10).json()["models"]
    return next(m for m in models if m["id"] == "all-minilm-l6-v2")


def wait_until(predicate, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_closing_the_socket_cancels_the_batch_and_the_next_request_is_served(
    minilm_models_dir: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory
) -> None:
    models_dir, table = minilm_models_dir
    config = tmp_path_factory.mktemp("embed-hangup") / "hypnos.toml"
    config.write_text(toml_model_config(models_dir, [table]))
    texts = [f"sentence number {i} about a fairly ordinary topic, written out at some length" for i in range(INPUTS)]
    body = json.dumps({"model": "all-minilm-l6-v2", "input": texts}).encode()
    with live_server(config) as base:
        warm = httpx.post(f"{base}/v1/embeddings", json={"model": "all-minilm-l6-v2", "input": "warm up"}, timeout=120)
        assert warm.status_code == 200
        with raw_post(base, "/v1/embeddings", body):
            assert wait_until(lambda: status(base)["active_leases"] == 1, 30)
            time.sleep(0.5)  # well into the batch
        assert wait_until(lambda: status(base)["active_leases"] == 0, 15)  # not the ~46 s the batch would take
        answer = httpx.post(f"{base}/v1/embeddings", json={"model": "all-minilm-l6-v2", "input": "next"}, timeout=30)
        assert answer.status_code == 200
        assert len(answer.json()["data"][0]["embedding"]) == 384
