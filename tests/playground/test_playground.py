"""The playground at `/` in headless Chromium against a real server: chat, voice, tiers, keys, errors, the lineup."""

from __future__ import annotations

import math
import struct
import wave
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

TIMEOUT = 30


def wait(browser: Any, condition: Any, timeout: float = TIMEOUT) -> Any:
    """The first truthy value of condition(browser) within the timeout."""
    return WebDriverWait(browser, timeout, poll_frequency=0.05).until(condition)


def css(browser: Any, selector: str) -> Any:
    return browser.find_element(By.CSS_SELECTOR, selector)


def open_page(browser: Any, base: str) -> None:
    """Load `/` in a clean tab state and wait until the lineup has filled the chat model picker."""
    browser.get(f"{base}/")
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{base}/")


def wait_lineup(browser: Any) -> None:
    wait(browser, lambda b: css(b, "#chat-model").get_attribute("value") == "fake-chat")


def tab(browser: Any, name: str) -> None:
    css(browser, f'#tabs button[data-tab="{name}"]').click()


def send_chat(browser: Any, text: str) -> None:
    box = css(browser, "#chat-input")
    box.clear()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def last_answer(browser: Any) -> Any:
    return browser.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")[-1]


def log_rows(browser: Any) -> list[list[str]]:
    """The request log table's cells (read in one go: the table is redrawn every poll)."""
    return browser.execute_script(  # type: ignore[no-any-return]
        "return [...document.querySelectorAll('#log-table tbody tr:not(.detail)')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )


def status_of(base: str, model: str, key: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    models = httpx.get(f"{base}/v1/memory/status", headers=headers).json()["models"]
    return next(m for m in models if m["id"] == model)


def test_page_needs_no_key_while_v1_stays_guarded(keyed_server: str) -> None:
    page = httpx.get(f"{keyed_server}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "Hypnos" in page.text
    script = httpx.get(f"{keyed_server}/playground/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    for path in ("/v1/models", "/v1/memory/status", "/v1/", "/v1/index.html", "/v1/playground/app.js"):
        response = httpx.get(f"{keyed_server}{path}")
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{keyed_server}/playground/../routes/playground.py").status_code == 404


def test_v1_paths_never_answer_with_the_page(server: str) -> None:
    for path in ("/v1", "/v1/", "/v1/index.html", "/v1/playground/app.js"):
        response = httpx.get(f"{server}{path}")
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("application/json")
        assert response.json()["error"]["type"] == "not_found"


def test_chat_streams_the_answer(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    send_chat(browser, "hello there")
    # The answer appears piece by piece: a partial answer is on screen while the stream is still open.
    partial = wait(
        browser,
        lambda b: b.execute_script(
            "const a = document.querySelector('#chat-log .msg.assistant .answer');"
            "return a && a.classList.contains('streaming') && a.textContent.trim() ? a.textContent : null;"
        ),
    )
    wait(browser, lambda b: not css(b, "#chat-log .answer").get_attribute("class").count("streaming"))
    final = css(browser, "#chat-log .msg.assistant .answer").text
    expected = httpx.post(
        f"{server}/v1/chat/completions",
        json={"model": "fake-chat", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 512},
    ).json()["choices"][0]["message"]["content"]
    assert final == expected
    assert final.startswith(partial) and len(partial) < len(final)
    assert "stop" in css(browser, "#chat-log .msg.assistant .tele").text
    shot("chat")


def test_thoughts_are_shown_apart_from_the_answer(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    Select(css(browser, "#chat-thinking")).select_by_value("low")
    send_chat(browser, "think first")
    wait(browser, lambda b: "stop" in css(b, "#chat-log .msg.assistant .tele").text)
    thoughts = css(browser, "#chat-log .msg.assistant .thoughts")
    answer = css(browser, "#chat-log .msg.assistant .answer")
    assert thoughts.is_displayed() and thoughts.text.startswith("Thoughts\nthinking:")
    assert answer.text and "thinking" not in answer.text


def test_a_tool_call_is_shown_and_its_result_answered(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    css(browser, "#chat-tools-on").click()
    send_chat(browser, "Weather in Paris?")
    card = wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#chat-log .tool-call"))[0]
    assert (
        card.find_element(By.CSS_SELECTOR, ".tool-name").text == 'tool call get_weather({"query":"Weather in Paris?"})'
    )
    wait(browser, lambda b: "tool_calls" in css(b, "#chat-log .msg.assistant .tele").text)
    shot("chat-tool-call")
    css(browser, "#chat-log .send-results").click()
    wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")) == 2)
    wait(browser, lambda b: "stop" in last_answer(b).find_element(By.CSS_SELECTOR, ".tele").text)
    assert css(browser, "#chat-log .msg.tool").text.endswith('{"temperature":18,"condition":"sunny"}')
    assert last_answer(browser).find_element(By.CSS_SELECTOR, ".answer").text


def _wav(path: Path, seconds: float = 1.0, rate: int = 16000) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        frames = (int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(int(seconds * rate)))
        out.writeframes(b"".join(struct.pack("<h", f) for f in frames))
    return path


def test_voice_turn_from_a_wav_file(browser: Any, server: str, shot: Any, tmp_path: Path) -> None:
    clip = _wav(tmp_path / "hello.wav")
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "voice")
    assert css(browser, "#voice-stt").get_attribute("value") == "fake-stt"
    assert css(browser, "#voice-tts").get_attribute("value") == "fake-tts"
    css(browser, "#voice-file").send_keys(str(clip))
    css(browser, "#voice-run").click()
    wait(browser, lambda b: css(b, '#voice-steps li[data-step="speech"]').get_attribute("class") == "done")
    heard = css(browser, '#voice-steps li[data-step="transcription"] .out').text
    assert heard == f"fake transcript of {clip.stat().st_size} bytes"
    assert css(browser, '#voice-steps li[data-step="chat"] .out').text
    assert int(css(browser, "#voice-audio").get_attribute("data-bytes")) > 44
    assert css(browser, "#voice-audio").get_attribute("src").startswith("blob:")
    # The three calls were one declared workflow: the server reports its end-to-end latency under `voice`.
    workflows = httpx.get(f"{server}/v1/memory/status").json()["latency"]["workflows"]
    assert workflows["voice"]["count"] >= 1
    shot("voice")


def test_tier_move_button_moves_the_model(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    start = status_of(server, "fake-embed")["current_tier"]
    target = "tier2_pinned_ram" if start != "tier2_pinned_ram" else "tier1_gpu_vram"
    row = wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '#tier-models tr[data-model="fake-embed"]'))[0]
    row.find_element(By.CSS_SELECTOR, f'button[data-target="{target}"]').click()
    wait(browser, lambda b: css(b, '#tier-models tr[data-model="fake-embed"]').get_attribute("data-tier") == target)
    assert status_of(server, "fake-embed")["current_tier"] == target
    segments = (
        "return [...document.querySelectorAll('.tier')]"
        ".map(t => [t.dataset.tier, [...t.querySelectorAll('.seg')].map(s => s.title)])"
    )
    tiers = wait(browser, lambda b: dict(b.execute_script(segments)))
    assert any(title.startswith("fake-embed: ") for title in tiers[target])
    assert not any(title.startswith("fake-embed: ") for title in tiers["tier3_nvme_ssd"])
    shot("tiers")


def test_disabling_a_model_disables_its_panel(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    toggle = '#tier-models tr[data-model="fake-image"] .toggle'
    wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, toggle))[0].click()
    wait(browser, lambda b: "unserved" in css(b, '#tabs button[data-tab="images"]').get_attribute("class"))
    assert status_of(server, "fake-image")["enabled"] is False
    assert css(browser, "#panel-images fieldset").get_attribute("disabled") is not None
    css(browser, toggle).click()
    wait(browser, lambda b: "unserved" not in css(b, '#tabs button[data-tab="images"]').get_attribute("class"))
    assert status_of(server, "fake-image")["enabled"] is True


def test_modalities_the_lineup_lacks_are_disabled(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    for name, modality in (("documents", "document_conversion"), ("entities", "entity_extraction")):
        button = css(browser, f'#tabs button[data-tab="{name}"]')
        assert "unserved" in button.get_attribute("class")
        tab(browser, name)
        assert css(browser, f"#panel-{name} fieldset").get_attribute("disabled") is not None
        notice = css(browser, f"#panel-{name} .unserved")
        assert notice.text == f"Not served by this server's lineup: no enabled model does {modality}."
    shot("documents-unserved")
    for name in ("chat", "voice", "images", "embeddings"):
        assert "unserved" not in css(browser, f'#tabs button[data-tab="{name}"]').get_attribute("class")


def test_the_servers_error_message_is_shown(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    box = css(browser, "#chat-max-tokens")
    box.clear()
    box.send_keys("0")
    send_chat(browser, "hello")
    error = wait(browser, lambda b: css(b, "#chat-error").is_displayed() and css(b, "#chat-error"))
    body = {"model": "fake-chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 0}
    expected = httpx.post(f"{server}/v1/chat/completions", json=body).json()["error"]
    assert error.find_element(By.CSS_SELECTOR, ".error-head").text == f"400 {expected['type']}"
    assert error.find_element(By.CSS_SELECTOR, ".error-message").text == expected["message"]
    shot("chat-error")


def test_images_and_embeddings_panels(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "images")
    Select(css(browser, "#images-size")).select_by_visible_text("512x512")
    css(browser, "#images-prompt").send_keys("a lighthouse at dawn")
    css(browser, "#images-seed").send_keys("7")
    css(browser, "#images-run").click()
    image = wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#images-out img"))[0]
    wait(browser, lambda b: b.execute_script("return arguments[0].naturalWidth", image) == 512)
    assert css(browser, "#images-out figcaption").text.startswith("seed 7")
    shot("images")
    tab(browser, "embeddings")
    css(browser, "#embeddings-run").click()
    score = wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#embeddings-score"))[0]
    a, b = httpx.post(
        f"{server}/v1/embeddings",
        json={
            "model": "fake-embed",
            "input": [
                css(browser, "#embeddings-a").get_attribute("value"),
                css(browser, "#embeddings-b").get_attribute("value"),
            ],
        },
    ).json()["data"]
    dot = sum(x * y for x, y in zip(a["embedding"], b["embedding"], strict=True))
    assert float(score.text) == pytest.approx(dot, abs=1e-4)
    shot("embeddings")


def test_request_log_shows_the_calls_with_telemetry(browser: Any, server: str) -> None:
    assert httpx.delete(f"{server}/v1/logs").json() == {"cleared": True}
    open_page(browser, server)
    wait_lineup(browser)
    send_chat(browser, "log me")
    wait(browser, lambda b: "stop" in css(b, "#chat-log .msg.assistant .tele").text)
    rows = wait(browser, lambda b: [r for r in log_rows(b) if r[1] == "/v1/chat/completions"])
    assert rows[0][2:4] == ["fake-chat", "200"]
    assert "→" in rows[0][5]  # tokens in -> out
    routes = {r[1] for r in log_rows(browser)}
    assert "/v1/memory/status" not in routes  # the visualizer's polling does not flood the log


def test_keys_configured_the_page_asks_then_works(browser: Any, keyed_server: str, api_key: str, shot: Any) -> None:
    open_page(browser, keyed_server)
    banner = wait(browser, lambda b: css(b, "#key-banner").is_displayed() and css(b, "#key-banner"))
    assert banner.find_element(By.ID, "key-banner-message").text == (
        "Missing API key. Send it as `Authorization: Bearer <key>` (server.api_keys)."
    )
    assert css(browser, "#panel-chat fieldset").get_attribute("disabled") is not None
    shot("keys-asked")
    field = css(browser, "#api-key")
    field.send_keys("not-the-key", Keys.ENTER)
    wait(browser, lambda b: css(b, "#key-banner-message").text.startswith("Invalid API key."))
    assert css(browser, "#key-banner-message").text == (
        "Invalid API key. Send one of the server's keys as `Authorization: Bearer <key>`."
    )
    field.clear()
    field.send_keys(api_key, Keys.ENTER)
    wait_lineup(browser)
    assert not css(browser, "#key-banner").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('hypnos.apiKey')") == api_key
    browser.get(f"{keyed_server}/")  # the key survives a reload of the tab
    wait_lineup(browser)
    send_chat(browser, "hello with a key")
    wait(browser, lambda b: "stop" in css(b, "#chat-log .msg.assistant .tele").text)
    assert css(browser, "#chat-log .msg.assistant .answer").text
    assert status_of(keyed_server, "fake-chat", api_key)["total_requests_served"] >= 1
