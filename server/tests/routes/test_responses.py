"""POST /v1/responses over the fake engine through the OpenAI SDK: shapes, the event stream, tools, stored responses
(retrieve, input_items, delete, cancel, per-key isolation), a corrupt database and a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from hypnos_server.app import HypnosApp
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
KEYS = [{"key": "key-a", "label": "alice"}, {"key": "key-b", "label": "bob"}]


def sdk(client: TestClient[HypnosApp], key: str = "unused") -> openai.OpenAI:
    """The OpenAI SDK speaking to the in-process app."""
    return openai.OpenAI(base_url="http://testserver.local/v1", api_key=key, http_client=client, max_retries=0)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def client(app_dir: Path) -> Iterator[TestClient[HypnosApp]]:
    with TestClient(build_app(config(server={"data_dir": str(app_dir)}))) as test_client:
        wait_ready(test_client)
        yield test_client


def test_a_plain_response_has_the_openai_shape_usage_and_telemetry(client: TestClient[HypnosApp]) -> None:
    response = sdk(client).responses.create(model="fake-chat", input="hello there", instructions="Be brief.")
    assert response.status == "completed" and response.object == "response"
    assert response.id.startswith("resp_") and response.instructions == "Be brief."
    assert [item.type for item in response.output] == ["message"]
    assert response.output_text and response.output[0].content[0].type == "output_text"
    usage = response.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens and usage.output_tokens > 0
    assert usage.input_tokens_details.cached_tokens == 0
    assert "inference_latency_ms" in response.model_extra["hypnos_telemetry"]


def test_the_event_stream_is_what_the_sdk_accumulates(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    with api.responses.stream(model="fake-chat", input="hello there") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert kinds.count("response.output_text.delta") == final.usage.output_tokens
    assert api.responses.retrieve(final.id).output_text == final.output_text


def test_a_function_call_round_trip_with_its_output(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    first = api.responses.create(model="fake-chat", input="Weather in Paris?", tools=[WEATHER])
    call = first.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and json.loads(call.arguments)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 18}'}
    second = api.responses.create(model="fake-chat", input=[result], tools=[WEATHER], previous_response_id=first.id)
    assert second.output[0].type == "message" and second.output_text
    streamed = list(api.responses.create(model="fake-chat", input="Weather?", tools=[WEATHER], stream=True))
    kinds = [event.type for event in streamed]
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert streamed[-1].response.output[0].type == "function_call"


def test_unknown_tools_and_bad_items_are_400s(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    with pytest.raises(openai.BadRequestError, match=r"tools\[0\]\.type"):
        api.responses.create(model="fake-chat", input="x", tools=[{"type": "teleport"}])
    with pytest.raises(openai.BadRequestError, match=r"input\[0\]\.type"):
        api.responses.create(model="fake-chat", input=[{"type": "item_reference", "id": "x"}])
    with pytest.raises(openai.NotFoundError):
        api.responses.create(model="fake-chat", input="x", previous_response_id="resp_unknown")
    with pytest.raises(openai.NotFoundError):
        api.responses.create(model="no-such-model", input="x")


def test_previous_response_id_continues_and_input_items_list_its_own_inputs(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    first = api.responses.create(model="fake-chat", input="one two three")
    second = api.responses.create(model="fake-chat", input="four", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # the history came along
    items = list(api.responses.input_items.list(second.id))
    assert [item.type for item in items] == ["message"] and items[0].content[0].text == "four"


def test_store_false_keeps_nothing_and_delete_removes(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    unstored = api.responses.create(model="fake-chat", input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(unstored.id)
    stored = api.responses.create(model="fake-chat", input="hi")
    api.responses.delete(stored.id)
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(stored.id)
    with pytest.raises(openai.NotFoundError):
        api.responses.delete(stored.id)


def test_one_key_never_reads_or_continues_another_keys_responses(app_dir: Path) -> None:
    with TestClient(build_app(config(server={"keys": KEYS, "data_dir": str(app_dir)}))) as client:
        wait_ready(client)
        alice, bob = sdk(client, "key-a"), sdk(client, "key-b")
        mine = alice.responses.create(model="fake-chat", input="secret plans")
        assert alice.responses.retrieve(mine.id).id == mine.id
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.input_items.list(mine.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.create(model="fake-chat", input="go on", previous_response_id=mine.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.delete(mine.id)
        assert alice.responses.retrieve(mine.id).output_text == mine.output_text


def test_a_restart_keeps_stored_responses(app_dir: Path) -> None:
    raw = config(server={"data_dir": str(app_dir)})
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        first = sdk(client).responses.create(model="fake-chat", input="remember this")
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        assert sdk(client).responses.retrieve(first.id).output_text == first.output_text


def test_a_corrupt_database_is_moved_aside_and_chat_still_works(app_dir: Path) -> None:
    app_dir.mkdir(parents=True)
    (app_dir / "responses.sqlite3").write_bytes(b"this is not a database" * 100)
    with TestClient(build_app(config(server={"data_dir": str(app_dir)}))) as client:
        wait_ready(client)
        chat = client.post(
            "/v1/chat/completions", json={"model": "fake-chat", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert chat.status_code == 200
        stored = sdk(client).responses.create(model="fake-chat", input="hi")
        assert sdk(client).responses.retrieve(stored.id).id == stored.id
    assert [p.name for p in app_dir.glob("responses.sqlite3.corrupt-*")], list(app_dir.iterdir())


def test_the_count_bound_drops_the_oldest(app_dir: Path) -> None:
    with TestClient(build_app(config(server={"data_dir": str(app_dir), "responses_max_count": 2}))) as client:
        wait_ready(client)
        api = sdk(client)
        ids = [api.responses.create(model="fake-chat", input=f"turn {n}").id for n in range(3)]
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(ids[0])
        assert api.responses.retrieve(ids[2]).id == ids[2]


def test_a_keys_daily_tokens_count_responses_and_messages(app_dir: Path) -> None:
    keys = [{"key": "k", "label": "capped", "tokens_per_day": 10}]
    with TestClient(build_app(config(server={"keys": keys, "data_dir": str(app_dir)}))) as client:
        wait_ready(client)
        sdk(client, "k").responses.create(model="fake-chat", input="one two three")  # 8 words out, 3 in
        with pytest.raises(openai.RateLimitError):
            sdk(client, "k").responses.create(model="fake-chat", input="again")
        message = {"model": "fake-chat", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        refused = client.post("/v1/messages", json=message, headers={"x-api-key": "k"})
        assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limit_error"


LONG = {"id": "long-chat", "modality": "text_generation", "engine": "fake", "fake": {"tokens": 700}}


def test_a_response_without_max_output_tokens_runs_past_the_chat_default(app_dir: Path) -> None:
    """Codex CLI sends no max_output_tokens and fails its turn on an incomplete response: unset is the server's cap
    (limits.max_tokens_cap), as OpenAI's unset is the model's limit, while chat keeps its 512."""
    with TestClient(build_app(config(models=[*config()["models"], LONG]))) as test_client:
        wait_ready(test_client)
        api = sdk(test_client)
        whole = api.responses.create(model="long-chat", input="go on")
        assert whole.status == "completed" and whole.max_output_tokens is None
        assert whole.usage is not None and whole.usage.output_tokens == 700  # the whole answer, past chat's 512
        asked = api.responses.create(model="long-chat", input="go on", max_output_tokens=600)
        assert asked.status == "incomplete" and asked.incomplete_details is not None
        assert asked.incomplete_details.reason == "max_output_tokens" and asked.usage.output_tokens == 600
        chat = api.chat.completions.create(model="long-chat", messages=[{"role": "user", "content": "go on"}])
        assert chat.usage is not None and chat.usage.completion_tokens == 512
        assert chat.choices[0].finish_reason == "length"
        with pytest.raises(openai.BadRequestError) as refused:
            api.responses.create(model="long-chat", input="go on", max_output_tokens=0)
        assert "max_output_tokens" in str(refused.value)
