"""The Conversations API and the Responses `conversation` field through the OpenAI SDK: a conversation holds its
items, responses read their history from it and add theirs, per API key, and survive a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from hypnos_server.app import HypnosApp
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

KEYS = [{"key": "key-a", "label": "alice"}, {"key": "key-b", "label": "bob"}]


def sdk(client: TestClient[HypnosApp], key: str = "key-a") -> openai.OpenAI:
    """The OpenAI SDK speaking to the in-process app."""
    return openai.OpenAI(base_url="http://testserver.local/v1", api_key=key, http_client=client, max_retries=0)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def client(data: Path) -> Iterator[TestClient[HypnosApp]]:
    with TestClient(build_app(config(server={"data_dir": str(data), "keys": KEYS}))) as test_client:
        wait_ready(test_client)
        yield test_client


def test_a_conversation_keeps_its_items_and_responses_continue_it(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    conversation = api.conversations.create(
        items=[{"type": "message", "role": "user", "content": "My name is Ada."}], metadata={"topic": "names"}
    )
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "names"}
    first = api.responses.create(model="fake-chat", input="What is my name?", conversation=conversation.id)
    assert first.conversation is not None and first.conversation.id == conversation.id
    alone = api.responses.create(model="fake-chat", input="What is my name?")
    assert first.usage.input_tokens > alone.usage.input_tokens  # the conversation's items came along
    items = list(api.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == ["message", "message", "message"]
    assert [item.role for item in items] == ["user", "user", "assistant"]
    assert items[2].content[0].text == first.output_text

    second = api.responses.create(model="fake-chat", input="And again?", conversation={"id": conversation.id})
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert len(list(api.conversations.items.list(conversation.id))) == 5

    added = api.conversations.items.create(
        conversation.id, items=[{"type": "message", "role": "user", "content": "One more."}]
    )
    assert [item.type for item in added.data] == ["message"]
    assert api.conversations.items.retrieve(added.data[0].id, conversation_id=conversation.id).id == added.data[0].id
    api.conversations.items.delete(added.data[0].id, conversation_id=conversation.id)
    assert len(list(api.conversations.items.list(conversation.id))) == 5
    updated = api.conversations.update(conversation.id, metadata={"topic": "other"})
    assert (
        updated.metadata == {"topic": "other"}
        and api.conversations.retrieve(conversation.id).metadata == updated.metadata
    )
    assert api.conversations.delete(conversation.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        api.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        api.responses.create(model="fake-chat", input="x", conversation=conversation.id)


def test_conversations_are_per_key_and_bad_requests_are_400s(client: TestClient[HypnosApp]) -> None:
    alice, bob = sdk(client, "key-a"), sdk(client, "key-b")
    conversation = alice.conversations.create()
    with pytest.raises(openai.NotFoundError):
        bob.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model="fake-chat", input="x", conversation=conversation.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.items.list(conversation.id)
    first = alice.responses.create(model="fake-chat", input="x")
    with pytest.raises(openai.BadRequestError, match="cannot be used together"):
        alice.responses.create(
            model="fake-chat", input="y", conversation=conversation.id, previous_response_id=first.id
        )
    with pytest.raises(openai.BadRequestError, match="at most 20"):
        alice.conversations.create(items=[{"type": "message", "role": "user", "content": "x"}] * 21)


def test_a_conversation_survives_a_restart(data: Path) -> None:
    settings = config(server={"data_dir": str(data), "keys": KEYS})
    with TestClient(build_app(settings)) as client:
        wait_ready(client)
        conversation = sdk(client).conversations.create(items=[{"role": "user", "content": "Remember 42."}])
        sdk(client).responses.create(model="fake-chat", input="ok?", conversation=conversation.id)
    with TestClient(build_app(settings)) as client:
        wait_ready(client)
        items = list(sdk(client).conversations.items.list(conversation.id, order="asc"))
        assert items[0].content[0].text == "Remember 42." and len(items) == 3
