"""Background responses (`background: true`) through the OpenAI SDK: answered at once, polled to their end, cancelled
(running or still queued), their event stream followed and resumed, failed after a shutdown or a crash."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import openai
import pytest
from hypnos_server.app import HypnosApp
from hypnos_server.responses_store import ResponseStore, StoredResponse
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

SLOW = {"id": "slow-chat", "modality": "text_generation", "engine": "fake", "fake": {"tokens": 400, "token_ms": 20}}
KEYS = [{"key": "key-a", "label": "alice"}, {"key": "key-b", "label": "bob"}]


def sdk(client: TestClient[HypnosApp], key: str = "unused") -> openai.OpenAI:
    """The OpenAI SDK speaking to the in-process app."""
    return openai.OpenAI(base_url="http://testserver.local/v1", api_key=key, http_client=client, max_retries=0)


def app_config(data: Path, **server: Any) -> dict[str, Any]:
    raw = config(server={"data_dir": str(data), **server})
    raw["models"].append(SLOW)
    return raw


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def client(data: Path) -> Iterator[TestClient[HypnosApp]]:
    with TestClient(build_app(app_config(data))) as test_client:
        wait_ready(test_client)
        yield test_client


def poll(api: openai.OpenAI, response_id: str, until: set[str], seen: set[str] | None = None) -> Any:
    """Retrieve the response until its status is one of `until` (the statuses on the way go into `seen`)."""
    for _ in range(1500):
        response = api.responses.retrieve(response_id)
        if seen is not None:
            seen.add(response.status)
        if response.status in until:
            return response
        time.sleep(0.01)
    raise AssertionError(f"{response_id} never reached {until}")


def sse(text: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body, which ends with the spec's literal `[DONE]`."""
    data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(payload) for payload in data[:-1]]


def test_a_background_response_answers_at_once_and_is_polled_to_its_end(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    started = api.responses.create(model="fake-chat", input="hello there", background=True)
    assert started.status in ("queued", "in_progress") and started.background is True
    assert started.output == []
    done = poll(api, started.id, {"completed"})
    foreground = api.responses.create(model="fake-chat", input="hello there")
    assert done.output_text == foreground.output_text and done.output_text
    assert done.usage is not None and done.usage.output_tokens > 0 and done.background is True
    listed = api.responses.input_items.list(started.id)
    assert [item.content[0].text for item in listed.data] == ["hello there"]
    again = api.responses.create(model="fake-chat", input="and now?", previous_response_id=done.id, background=True)
    assert poll(api, again.id, {"completed"}).previous_response_id == done.id


def test_a_running_background_response_is_cancelled(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    started = api.responses.create(model="slow-chat", input="go", max_output_tokens=400, background=True)
    running = poll(api, started.id, {"in_progress"})
    assert running.status == "in_progress"
    cancelled = api.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    final = poll(api, started.id, {"cancelled", "completed", "incomplete", "failed"})
    assert final.status == "cancelled"
    assert len(final.output_text.split()) < 400
    assert api.responses.cancel(started.id).status == "cancelled"  # twice: the same cancelled response
    done = api.responses.create(model="fake-chat", input="quick", background=True)
    poll(api, done.id, {"completed"})
    with pytest.raises(openai.BadRequestError, match="no longer in progress"):
        api.responses.cancel(done.id)


def test_a_queued_background_response_is_cancelled_before_it_runs(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    first = api.responses.create(model="slow-chat", input="one", background=True)
    poll(api, first.id, {"in_progress"})
    second = api.responses.create(model="slow-chat", input="two", background=True)  # the one slot is taken
    assert api.responses.retrieve(second.id).status == "queued"
    assert api.responses.cancel(second.id).status == "cancelled"
    assert poll(api, second.id, {"cancelled", "failed", "completed"}).status == "cancelled"
    assert api.responses.retrieve(second.id).output == []
    api.responses.cancel(first.id)
    assert poll(api, first.id, {"cancelled", "completed"}).status == "cancelled"


def test_the_event_stream_is_followed_and_replayed_after_a_sequence_number(client: TestClient[HypnosApp]) -> None:
    body = {"model": "fake-chat", "input": "hello there", "background": True, "stream": True}
    with client.stream("POST", "/v1/responses", json=body) as streamed:
        assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
        whole = sse(streamed.read().decode())
    assert [event["sequence_number"] for event in whole] == list(range(len(whole)))
    assert whole[0]["type"] == "response.created" and whole[-1]["type"] == "response.completed"
    response_id = whole[0]["response"]["id"]
    api = sdk(client)
    final = whole[-1]["response"]
    assert api.responses.retrieve(response_id).output_text == final["output"][0]["content"][0]["text"]
    replayed = list(api.responses.retrieve(response_id, stream=True, starting_after=3))
    assert [event.sequence_number for event in replayed] == [event["sequence_number"] for event in whole[4:]]
    assert replayed[-1].type == "response.completed" and replayed[-1].response.id == response_id
    foreground = api.responses.create(model="fake-chat", input="no background")
    with pytest.raises(openai.BadRequestError, match="no event stream"):
        list(api.responses.retrieve(foreground.id, stream=True))


def test_a_background_response_deleted_while_it_runs_stops_and_stays_deleted(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    started = api.responses.create(model="slow-chat", input="go", background=True)
    poll(api, started.id, {"in_progress"})
    assert api.responses.delete(started.id) is None
    nxt = api.responses.create(model="slow-chat", input="next", max_output_tokens=2, background=True)
    poll(api, nxt.id, {"incomplete"})  # the one slot came free ...
    engine = client.app.state.hypnos.scheduler.get("slow-chat").engine
    assert engine.cancelled_requests == 1  # ... because the deleted one stopped at a cancellation check
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(started.id)


def test_background_needs_store_and_a_known_model(client: TestClient[HypnosApp]) -> None:
    api = sdk(client)
    with pytest.raises(openai.BadRequestError, match="`background` needs `store`"):
        api.responses.create(model="fake-chat", input="hi", background=True, store=False)
    with pytest.raises(openai.NotFoundError):
        api.responses.create(model="no-such-model", input="hi", background=True)
    bad = client.get("/v1/responses/resp_x", params={"starting_after": "soon"})
    assert bad.status_code == 400 and "starting_after" in bad.json()["error"]["message"]


def test_one_key_never_sees_or_cancels_another_keys_background_response(data: Path) -> None:
    with TestClient(build_app(app_config(data, keys=KEYS))) as client:
        wait_ready(client)
        alice, bob = sdk(client, "key-a"), sdk(client, "key-b")
        mine = alice.responses.create(model="slow-chat", input="go", background=True)
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.cancel(mine.id)
        assert alice.responses.cancel(mine.id).status == "cancelled"


def test_a_background_response_counts_against_its_keys_daily_tokens(data: Path) -> None:
    keys = [{"key": "k", "label": "capped", "tokens_per_day": 10}]
    with TestClient(build_app(app_config(data, keys=keys))) as client:
        wait_ready(client)
        api = sdk(client, "k")
        started = api.responses.create(model="fake-chat", input="one two three", background=True)
        for _ in range(500):  # the generation's record is charged when it ends (8 words out, 3 in)
            try:
                api.responses.retrieve(started.id)
            except openai.RateLimitError:
                return
            time.sleep(0.01)
        raise AssertionError("the background response's tokens were never charged")


def test_a_shutdown_stores_a_running_background_response_as_failed(data: Path) -> None:
    with TestClient(build_app(app_config(data))) as client:
        wait_ready(client)
        api = sdk(client)
        started = api.responses.create(model="slow-chat", input="go", background=True)
        poll(api, started.id, {"in_progress"})
    with TestClient(build_app(app_config(data))) as client:
        wait_ready(client)
        after = sdk(client).responses.retrieve(started.id)
    assert after.status == "failed" and after.error is not None and "shut down" in after.error.message


def test_a_response_pending_at_a_crash_is_failed_at_the_next_start(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_count=10, max_age_secs=3600)
    running = {"id": "resp_1", "status": "in_progress"}
    stored = StoredResponse(
        id="resp_1", owner="", created_at=time.time(), response=running, input_items=[], conversation=[]
    )
    store.put(stored, pending=True)
    store.put(msgspec.structs.replace(stored, id="resp_2"), pending=True)
    store.put(msgspec.structs.replace(stored, id="resp_2", response={"id": "resp_2", "status": "completed"}))
    # no close: the process died
    reopened = ResponseStore(tmp_path, max_count=10, max_age_secs=3600)
    crashed = reopened.get("resp_1", "")
    assert crashed is not None and crashed.response["status"] == "failed"
    assert "create it again" in crashed.response["error"]["message"]
    finished = reopened.get("resp_2", "")
    assert finished is not None and finished.response["status"] == "completed"


def test_an_engine_refusal_before_the_first_token_is_stored_and_streamed_as_it_is(
    client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hypnos.errors import HypnosError

    engine = client.app.state.hypnos.scheduler.get("fake-chat").engine

    async def refuse(request: Any, cancel: Any) -> Any:
        raise HypnosError(400, "invalid_request_error", "the prompt is longer than the model's context (8 tokens)")
        yield  # an async generator, as engines' chat is

    monkeypatch.setattr(engine, "chat", refuse)
    api = sdk(client)
    started = api.responses.create(model="fake-chat", input="hello there", background=True)
    failed = poll(api, started.id, {"failed", "completed", "cancelled"})
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "invalid_request_error" and "longer than the model's context" in failed.error.message
    replay = client.get(f"/v1/responses/{started.id}", params={"stream": "true"})
    events = sse(replay.text)
    assert events and events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "invalid_request_error"


def test_a_running_background_response_holds_its_keys_concurrency_slot(data: Path) -> None:
    keys = [{"key": "k", "label": "single", "max_concurrent": 1}]
    with TestClient(build_app(app_config(data, keys=keys))) as client:
        wait_ready(client)
        api = sdk(client, "k")
        running = api.responses.create(model="slow-chat", input="go on", background=True)
        with pytest.raises(openai.RateLimitError) as refused:  # the run, not the answered POST, holds the slot
            api.chat.completions.create(model="fake-chat", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.code == "max_concurrent"
        poll(api, running.id, {"in_progress"})  # reading and cancelling it take no slot
        assert api.responses.cancel(running.id).status == "cancelled"
        for _ in range(500):  # the slot comes back when the run has stopped
            try:
                api.chat.completions.create(model="fake-chat", messages=[{"role": "user", "content": "hi"}])
                return
            except openai.RateLimitError:
                time.sleep(0.01)
        raise AssertionError("the cancelled background response never gave its slot back")


def test_background_requests_refused_before_they_run_give_their_concurrency_slot_back(data: Path) -> None:
    keys = [{"key": "k", "label": "single", "max_concurrent": 2}]
    raw = app_config(data, keys=keys)
    raw["models"].append({"id": "text-only", "modality": "text_generation", "engine": "fake"})
    picture = "data:image/png;base64,iVBORw0KGgo="
    content = [{"type": "input_text", "text": "what is it?"}, {"type": "input_image", "image_url": picture}]
    body = {"model": "text-only", "input": [{"role": "user", "content": content}], "background": True}
    headers = {"authorization": "Bearer k"}
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        for _ in range(8):  # an image for a text-only model: refused while the run is built
            refused = client.post("/v1/responses", json=body, headers=headers)
            assert refused.status_code == 400, refused.text
        answered = sdk(client, "k").chat.completions.create(
            model="fake-chat", messages=[{"role": "user", "content": "hi"}]
        )
        assert answered.choices[0].message.content
