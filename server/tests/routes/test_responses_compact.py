"""POST /v1/responses/compact through the OpenAI SDK: the conversation (input items, or a stored response's) becomes
its user messages and one compaction item, and a later request that carries them gives the model the summary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypnos_server.app import HypnosApp
from hypnos_server.routes.responses_compaction import read_summary
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready


def sdk(client: TestClient[HypnosApp]) -> openai.OpenAI:
    """The OpenAI SDK speaking to the in-process app."""
    return openai.OpenAI(base_url="http://testserver.local/v1", api_key="unused", http_client=client, max_retries=0)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[HypnosApp]]:
    with TestClient(build_app(config(server={"data_dir": str(tmp_path / "data")}))) as test_client:
        wait_ready(test_client)
        yield test_client


def prompts(client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The whole prompt text of every chat the fake model is given from now on."""
    engine = client.app.state.hypnos.scheduler.get("fake-chat").engine
    seen: list[str] = []
    original = engine.chat

    def spy(request: Any, cancel: Any) -> Any:
        seen.append("\n".join(message.text() for message in request.messages))
        return original(request, cancel)

    monkeypatch.setattr(engine, "chat", spy)
    return seen


def test_a_conversation_compacts_into_a_summary_the_next_request_sees(
    client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    api = sdk(client)
    seen = prompts(client, monkeypatch)
    history = [
        {"role": "user", "content": "My name is Ada and I work on the parser."},
        {"role": "assistant", "content": "Noted, Ada."},
    ]
    compacted = api.responses.compact(model="fake-chat", input=history)
    assert compacted.object == "response.compaction" and compacted.usage.output_tokens > 0
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    assert "Ada" in seen[-1] and "summary" in seen[-1]  # the model was asked to summarise the conversation
    opaque = compacted.output[1].encrypted_content  # only this server reads it
    summary = read_summary(opaque)
    assert summary and summary not in opaque

    later = api.responses.create(
        model="fake-chat", input=[*(item.model_dump() for item in compacted.output), {"role": "user", "content": "Go"}]
    )
    assert later.status == "completed"
    assert f"A summary of the conversation so far (it replaces the earlier turns):\n\n{summary}" in seen[-1]
    assert "Noted, Ada." not in seen[-1]


def test_a_stored_response_compacts_by_its_id_and_foreign_compaction_items_are_refused(
    client: TestClient[HypnosApp],
) -> None:
    api = sdk(client)
    first = api.responses.create(model="fake-chat", input="Remember the number 42.")
    compacted = api.responses.compact(model="fake-chat", previous_response_id=first.id)
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    assert compacted.output[0].content[0].text == "Remember the number 42."
    with pytest.raises(openai.NotFoundError):
        api.responses.compact(model="fake-chat", previous_response_id="resp_unknown")
    foreign = {"type": "compaction", "encrypted_content": "gAAAAABpM0Yj-opaque"}
    with pytest.raises(openai.BadRequestError, match="did not make"):
        api.responses.create(model="fake-chat", input=[foreign, {"role": "user", "content": "hi"}])
