"""The voice tab over one realtime WebSocket session: a file, hold to talk, and hands-free with the server's VAD and
barge-in (Chromium's microphone playing a WAV file), against the fake transcription, chat and speech models."""

from __future__ import annotations

import math
import struct
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_kit import css, open_page, tab, wait, wait_lineup
from conftest import chromium
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

# Every event the page sends on a WebSocket, kept in window.sentEvents.
SPY_SOCKET = """
window.sentEvents = [];
const send = WebSocket.prototype.send;
WebSocket.prototype.send = function (data) { window.sentEvents.push(JSON.parse(data)); return send.call(this, data); };
"""


def _wav(path: Path, parts: list[tuple[float, int]], rate: int = 16000) -> Path:
    """A mono 16-bit WAV of (seconds, amplitude) parts of a 300 Hz tone (amplitude 0: silence)."""
    frames = bytearray()
    for seconds, amplitude in parts:
        for i in range(int(seconds * rate)):
            frames += struct.pack("<h", int(amplitude * math.sin(2 * math.pi * 300 * i / rate)))
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(bytes(frames))
    return path


def _rows(browser: Any, kind: str) -> list[Any]:
    return browser.find_elements(By.CSS_SELECTOR, f"#voice-log li.turn.{kind}")


def _finished(browser: Any, count: int = 1) -> bool:
    """`count` answers have ended (done, cancelled or failed)."""
    return len(browser.find_elements(By.CSS_SELECTOR, "#voice-log li.assistant:not(.running)")) >= count


def _last_realtime_record(server: str) -> dict[str, Any]:
    return httpx.get(f"{server}/v1/logs", params={"route": "/v1/realtime", "limit": 1}).json()["records"][0]


def test_a_file_is_heard_answered_and_spoken_over_the_websocket(
    browser: Any, server: str, shot: Any, tmp_path: Path
) -> None:
    clip = _wav(tmp_path / "hello.wav", [(1.0, 8000)])
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "voice")
    assert css(browser, "#voice-stt").get_attribute("value") == "fake-stt"
    assert css(browser, "#voice-tts").get_attribute("value") == "fake-tts"
    css(browser, "#voice-file").send_keys(str(clip))
    css(browser, "#voice-run").click()
    wait(browser, _finished)
    (user,) = _rows(browser, "user")
    assert user.find_element(By.CSS_SELECTOR, ".out").text == f"fake transcript of {44 + 24000 * 2} bytes"  # 1 s
    (answer,) = _rows(browser, "assistant")
    assert "done" in answer.get_attribute("class") and answer.find_element(By.CSS_SELECTOR, ".out").text
    assert "first audio" in answer.find_element(By.CSS_SELECTOR, ".tele").text
    audio = css(browser, "#voice-audio")
    assert int(audio.get_attribute("data-bytes")) > 44 and audio.get_attribute("src").startswith("blob:")
    assert int(audio.get_attribute("data-played")) == int(audio.get_attribute("data-bytes")) - 44  # all of it queued
    assert css(browser, "#voice-state").text == "connected"  # the answer is done; not hands-free
    record = _last_realtime_record(server)
    assert record["status"] == 200 and "end_of_speech_to_first_audio_ms" in record["stages_ms"]
    shot("voice")


def test_the_session_carries_the_pages_key(browser: Any, keyed_server: str, api_key: str, tmp_path: Path) -> None:
    open_page(browser, keyed_server)
    css(browser, "#api-key").send_keys(api_key, Keys.ENTER)
    wait_lineup(browser)
    tab(browser, "voice")
    css(browser, "#voice-file").send_keys(str(_wav(tmp_path / "keyed.wav", [(0.5, 8000)])))
    css(browser, "#voice-run").click()
    wait(browser, _finished)
    assert "done" in _rows(browser, "assistant")[0].get_attribute("class")
    headers = {"Authorization": f"Bearer {api_key}"}
    records = httpx.get(f"{keyed_server}/v1/logs", params={"route": "/v1/realtime"}, headers=headers).json()
    assert records["records"][0]["status"] == 200


def test_the_session_speaks_with_the_picked_voice_and_models(browser: Any, server: str, tmp_path: Path) -> None:
    listed = {m["id"]: m for m in httpx.get(f"{server}/v1/models").json()["data"]}
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "voice")
    voices = listed["fake-tts"]["voices"]
    wait(browser, lambda b: [o.get_attribute("value") for o in Select(css(b, "#voice-voice")).options] == voices)
    Select(css(browser, "#voice-voice")).select_by_value("bf_emma")
    browser.execute_script(SPY_SOCKET)
    css(browser, "#voice-file").send_keys(str(_wav(tmp_path / "hi.wav", [(0.3, 8000)])))
    css(browser, "#voice-run").click()
    wait(browser, _finished)
    update = browser.execute_script("return window.sentEvents.find((e) => e.type === 'session.update').session")
    assert update["voice"] == "bf_emma" and update["turn_detection"] is None
    assert update["hypnos"] == {"transcription_model": "fake-stt", "speech_model": "fake-tts"}


def test_hold_to_talk_streams_the_microphone_and_commits_on_release(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "voice")
    talk = css(browser, "#voice-talk")
    ActionChains(browser).click_and_hold(talk).perform()
    wait(browser, lambda b: "active" in css(b, "#voice-talk").get_attribute("class"))
    time.sleep(1.0)  # a second of Chromium's synthetic microphone
    ActionChains(browser).release(talk).perform()
    wait(browser, _finished)
    heard = _rows(browser, "user")[0].find_element(By.CSS_SELECTOR, ".out").text
    size = int(heard.removeprefix("fake transcript of ").removesuffix(" bytes"))
    assert size > 44 + 24000  # at least half a second of 24 kHz pcm16
    assert "done" in _rows(browser, "assistant")[0].get_attribute("class")


# Each event the page sends, with the page's clock, in window.sentAt.
SPY_TIMES = """
window.sentAt = [];
const sendTimed = WebSocket.prototype.send;
WebSocket.prototype.send = function (data) {
  window.sentAt.push([performance.now(), JSON.parse(data).type]);
  return sendTimed.call(this, data);
};
"""


def test_three_held_turns_each_stream_one_microphone(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "voice")
    browser.execute_script(SPY_TIMES)
    talk = css(browser, "#voice-talk")
    sizes = []
    for turn in range(1, 4):
        ActionChains(browser).click_and_hold(talk).perform()
        wait(browser, lambda b: "active" in css(b, "#voice-talk").get_attribute("class"))
        time.sleep(1.5)
        ActionChains(browser).release(talk).perform()
        wait(browser, lambda b, n=turn: _finished(b, n), timeout=40)
        heard = _rows(browser, "user")[turn - 1].find_element(By.CSS_SELECTOR, ".out").text
        sizes.append(int(heard.removeprefix("fake transcript of ").removesuffix(" bytes")))
        time.sleep(0.5)  # a microphone left running would keep sending between turns
    sent = browser.execute_script("return window.sentAt")
    commits = [at for at, kind in sent if kind == "input_audio_buffer.commit"]
    clears = [at for at, kind in sent if kind == "input_audio_buffer.clear"]
    assert len(commits) == 3
    for start, end in zip(clears[-3:], commits, strict=True):
        appends = [at for at, kind in sent if kind == "input_audio_buffer.append" and start <= at <= end]
        rate = len(appends) / ((end - start) / 1000)
        assert 30 <= rate <= 60, rate  # one 20 ms block at a time: 50 a second, not 100 or 150
    between = [at for at, kind in sent if kind == "input_audio_buffer.append" and commits[0] < at < clears[-2]]
    assert between == []  # nothing streams while nobody holds the button
    assert all(size > 44 + 24000 for size in sizes)  # each turn heard: at least half a second
    assert max(sizes) < 1.5 * min(sizes), sizes  # and only its own audio (not 1x, 2x, 3x)


def test_a_tap_on_hold_to_talk_leaves_the_microphone_off(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "voice")
    css(browser, "#voice-talk").click()  # pressed and released before the microphone is up
    wait(browser, lambda b: css(b, "#voice-state").text == "connected")
    time.sleep(1.0)  # what a microphone left on would send meanwhile
    assert "active" not in css(browser, "#voice-talk").get_attribute("class")
    assert css(browser, "#voice-state").text == "connected" and not _rows(browser, "user")


@pytest.fixture
def talking_browser(tmp_path: Path) -> Iterator[Any]:
    """A Chromium whose microphone plays a question, a pause, and speech again while the answer is spoken."""
    spoken = _wav(tmp_path / "mic.wav", [(0.5, 0), (0.8, 12000), (1.0, 0), (0.6, 12000), (8.0, 0)], rate=48000)
    with chromium(f"--use-file-for-fake-audio-capture={spoken}%noloop") as driver:
        yield driver


def test_hands_free_hears_turns_and_speaking_over_the_answer_interrupts_it(talking_browser: Any, server: str) -> None:
    browser = talking_browser
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "voice")
    css(browser, "#voice-handsfree").click()
    wait(browser, _finished, timeout=40)
    wait(browser, lambda b: _finished(b, 2), timeout=40)
    first, second = _rows(browser, "assistant")[:2]
    assert "interrupted" in first.get_attribute("class")  # the second burst of speech cut the first answer
    assert "done" in second.get_attribute("class") and second.find_element(By.CSS_SELECTOR, ".out").text
    users = _rows(browser, "user")
    assert len(users) >= 2 and all(
        u.find_element(By.CSS_SELECTOR, ".out").text.startswith("fake transcript") for u in users
    )
    assert int(css(browser, "#voice-audio").get_attribute("data-bytes")) > 44
    assert css(browser, "#voice-handsfree").get_attribute("aria-pressed") == "true"
    metrics = httpx.get(f"{server}/metrics").text
    counted = [line for line in metrics.splitlines() if line.startswith("hypnos_realtime_barge_ins_total ")]
    assert counted and float(counted[0].split()[1]) >= 1, counted
