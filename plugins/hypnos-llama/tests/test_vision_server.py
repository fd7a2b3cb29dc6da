"""Images through the server app (Litestar, in process): usage grows with the image, 400s for bad or unwanted media."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("PIL", reason="the vision tests need pillow")
pytest.importorskip("hypnos_server.app", reason="the server tests need hypnos-server")

from hypnos_llama.testing_vision import image_part, png_bytes

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def client(tiny_vision: Any, tiny_gguf: Any) -> Iterator[Any]:
    """An app serving the tiny vision model (projector as aux_path) and the tiny text-only llama."""
    import hypnos_llama.plugin
    from hypnos.config import settings_from_mapping
    from hypnos.plugins import make_plugin_manager
    from hypnos_server.app import create_app
    from litestar.testing import TestClient

    llama = {"n_threads": 1}
    raw = {
        "models_dir": str(tiny_vision.weights.parent),
        "models": [
            {
                "id": "tiny-vl",
                "modality": "text_generation",
                "engine": "ggml_llama",
                "slots": 2,
                "weights_path": str(tiny_vision.weights),
                "aux_path": str(tiny_vision.projector),
                "context_len": 2048,
                "llama": llama,
            },
            {
                "id": "tiny-text",
                "modality": "text_generation",
                "engine": "ggml_llama",
                "slots": 1,
                "weights_path": str(tiny_gguf),
                "context_len": 2048,
                "llama": llama,
            },
        ],
    }
    app = create_app(settings_from_mapping(raw), make_plugin_manager(autoload=False, plugins=[hypnos_llama.plugin]))
    with TestClient(app, timeout=120) as test_client:
        deadline = time.monotonic() + 60
        while test_client.get("/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield test_client


def _chat(client: Any, *parts: Any, model: str = "tiny-vl") -> Any:
    content = [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 3, "temperature": 0}
    return client.post(CHAT, json=body)


def test_the_image_grows_the_prompt_and_png_and_jpeg_both_work(client: Any) -> None:
    plain = _chat(client, "What is  this?")
    assert plain.status_code == 200, plain.text
    for image_format, mime in (("PNG", "image/png"), ("JPEG", "image/jpeg")):
        answer = _chat(client, "What is ", image_part(png_bytes((280, 280), image_format=image_format), mime), " this?")
        assert answer.status_code == 200, answer.text
        grown = answer.json()["usage"]["prompt_tokens"] - plain.json()["usage"]["prompt_tokens"]
        assert grown >= 100, image_format  # 10x10 merged patches
        assert answer.json()["usage"]["completion_tokens"] >= 1


def test_the_model_lists_vision_from_its_projector(client: Any) -> None:
    status = client.get("/v1/memory/status").json()
    modalities = {m["id"]: m["modalities"] for m in status["models"]}
    assert "vision" in modalities["tiny-vl"] and "vision" not in modalities["tiny-text"]


def test_a_corrupt_image_is_a_400(client: Any) -> None:
    corrupt = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"xx").decode()}}
    answer = _chat(client, "look", corrupt)
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_an_image_to_a_model_without_projector_is_a_400(client: Any) -> None:
    answer = _chat(client, "look", image_part(png_bytes()), model="tiny-text")
    assert answer.status_code == 400
    assert "vision" in answer.json()["error"]["message"]
