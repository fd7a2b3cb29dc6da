"""Stored responses against the real server (granian): a stream cancelled by its id, and a kill -9 after a
response completed (it is retrievable after the restart)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import openai
import pytest
from hypnos_server.testing import live_process

CONFIG = """
[[models]]
id = "slow-chat"
modality = "text_generation"
engine = "fake"
[models.fake]
tokens = 400
token_ms = 20
"""
ENV = {"HYPNOS_PLUGINS": "fake"}


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "hypnos.toml"
    path.write_text(CONFIG)  # stored responses go to data/ next to it
    return path


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)


def test_a_stream_is_cancelled_by_its_id_and_stored_as_cancelled(config_path: Path) -> None:
    with live_process(config_path, env=ENV, ready_timeout=60) as (_, base):
        api = sdk(base)
        events: list[Any] = []
        started = threading.Event()

        def read() -> None:
            for event in api.responses.create(model="slow-chat", input="go", max_output_tokens=400, stream=True):
                events.append(event)
                started.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(30)
        cancelled = api.responses.cancel(events[0].response.id)
        reader.join(60)
        assert cancelled.status == "cancelled"
        assert events[-1].type == "response.failed" and events[-1].response.status == "cancelled"
        assert len([e for e in events if e.type == "response.output_text.delta"]) < 400
        assert api.responses.retrieve(cancelled.id).status == "cancelled"
        assert api.responses.cancel(cancelled.id).status == "cancelled"  # twice: the same cancelled response
        done = api.responses.create(model="slow-chat", input="short", max_output_tokens=2)
        with pytest.raises(openai.BadRequestError, match="no longer in progress"):
            api.responses.cancel(done.id)


def test_a_response_completed_before_a_kill_9_is_retrievable_after_the_restart(config_path: Path) -> None:
    with live_process(config_path, env=ENV, ready_timeout=60) as (process, base):
        done = sdk(base).responses.create(model="slow-chat", input="remember", max_output_tokens=3)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    with live_process(config_path, env=ENV, ready_timeout=60) as (_, base):
        again = sdk(base).responses.retrieve(done.id)
    assert again.status == "incomplete" and again.output_text == done.output_text


def test_a_background_stream_left_by_its_client_runs_on_and_resumes_after_a_sequence_number(
    config_path: Path,
) -> None:
    with live_process(config_path, env=ENV, ready_timeout=60) as (_, base):
        api = sdk(base)
        started = api.responses.create(
            model="slow-chat", input="go", max_output_tokens=40, background=True, stream=True
        )
        first = next(iter(started))
        started.close()  # the client leaves after the created event
        assert first.type == "response.created"
        resumed = list(api.responses.retrieve(first.response.id, stream=True, starting_after=2))
        assert [e.sequence_number for e in resumed] == list(range(3, 3 + len(resumed)))
        assert resumed[-1].type == "response.incomplete"  # it ran to its 40 tokens without a client
        deltas = "".join(e.delta for e in resumed if e.type == "response.output_text.delta")
        assert deltas and api.responses.retrieve(first.response.id).output_text.endswith(deltas)


def test_a_background_response_running_at_a_kill_9_is_failed_after_the_restart(config_path: Path) -> None:
    with live_process(config_path, env=ENV, ready_timeout=60) as (process, base):
        api = sdk(base)
        started = api.responses.create(model="slow-chat", input="go", background=True)
        for _ in range(500):
            if api.responses.retrieve(started.id).status == "in_progress":
                break
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    with live_process(config_path, env=ENV, ready_timeout=60) as (_, base):
        after = sdk(base).responses.retrieve(started.id)
    assert after.status == "failed" and after.error is not None and "create it again" in after.error.message
