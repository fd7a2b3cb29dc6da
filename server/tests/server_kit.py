"""Server test kit: an app over the fake engine built from a config mapping, and small response helpers."""

from __future__ import annotations

import copy
from typing import Any

from hypnos.config import settings_from_mapping
from hypnos.engine import ChatFinished, ContentDelta, EngineKind, ReasoningDelta, ToolCallEvent
from hypnos.hookspecs import hookimpl
from hypnos.openai import ToolCall, ToolCallFunction
from hypnos.testing import fake_plugin
from hypnos.testing.fake_engine import FakeEngine
from hypnos.types import Modality
from hypnos_server.app import HypnosApp, create_app
from hypnos_server.plugin_loading import server_plugin_manager
from litestar.testing import TestClient

ALL_MODALITIES = ["vision", "embeddings", "speech_to_text", "text_to_speech", "image_generation"]

BASE_CONFIG: dict[str, Any] = {
    "models": [
        {"id": "fake-chat", "modality": "text_generation", "engine": "fake", "modalities": ALL_MODALITIES},
        {"id": "fake-embed", "modality": "embeddings", "engine": "fake"},
        {"id": "fake-image", "modality": "image_generation", "engine": "fake", "image": {"edit": True}},
        {"id": "fake-off", "modality": "text_generation", "engine": "fake", "enabled": False},
    ]
}


def config(**sections: Any) -> dict[str, Any]:
    """BASE_CONFIG with top-level sections replaced or added."""
    raw = copy.deepcopy(BASE_CONFIG)
    raw.update(copy.deepcopy(sections))
    return raw


def build_app(raw: dict[str, Any] | None = None, plugins: list[object] | None = None) -> HypnosApp:
    """An app for this config over the fake engine plugin (plus extra plugins), engines in this process unless the
    config sets `server.isolation`."""
    raw = copy.deepcopy(raw if raw is not None else config())
    raw.setdefault("server", {}).setdefault("isolation", "thread")  # engine hosts where a test asks for them
    settings = settings_from_mapping(raw)
    manager = server_plugin_manager(autoload=False, plugins=[fake_plugin, *(plugins or [])])
    return create_app(settings, manager)


def wait_ready(client: TestClient[Any], attempts: int = 500) -> None:
    """Poll /ready until it answers 200."""
    import time

    for _ in range(attempts):
        if client.get("/ready").status_code == 200:
            return
        time.sleep(0.02)
    raise AssertionError("the app never became ready")


def error_of(response: Any) -> dict[str, Any]:
    """The inner error object of a JSON error response."""
    return response.json()["error"]  # type: ignore[no-any-return]


class ScriptedEngine(FakeEngine):
    """A fake engine whose chat follows the model's `[models.script]` table: thoughts, text, tool calls, failure."""

    async def chat(self, request, cancel):  # type: ignore[no-untyped-def, override]
        script = self.model.engine_options.get("script", {})
        for text in script.get("reasoning", []):
            yield ReasoningDelta(text)
        for text in script.get("content", []):
            yield ContentDelta(text)
        for index, name in enumerate(script.get("tools", [])):
            yield ToolCallEvent(ToolCall(id=f"call_{index}", function=ToolCallFunction(name=name, arguments='{"a":1}')))
        if script.get("fail"):
            raise RuntimeError("decoder exploded")
        yield ChatFinished(
            finish_reason=script.get("finish", "stop"),
            prompt_tokens=3,
            completion_tokens=5,
            cached_tokens=script.get("cached", 0),
        )


class ScriptedPlugin:
    """Registers the `scripted` engine kind."""

    @hookimpl
    def hypnos_engine_kinds(self) -> list[EngineKind]:
        """The scripted kind."""
        return [
            EngineKind(
                name="scripted",
                modalities=frozenset(Modality),
                factory=ScriptedEngine,
                config_keys=frozenset({"script", "fake"}),
                spec_kind="ggml_llama",
            )
        ]


def scripted_model(model_id: str, **script: Any) -> dict[str, Any]:
    """A `[[models]]` table for a scripted chat model."""
    return {"id": model_id, "modality": "text_generation", "engine": "scripted", "script": script}
