"""The playground at `/` in headless Chromium against a real server: chat, voice, tiers, keys, errors, the lineup."""

from __future__ import annotations

import base64
import math
import struct
import time
import wave
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

TIMEOUT = 30
PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


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


def test_an_attached_image_goes_as_an_image_url_part(browser: Any, server: str, tmp_path: Path) -> None:
    picture = tmp_path / "dot.png"
    picture.write_bytes(base64.b64decode(PNG_1X1))
    open_page(browser, server)
    wait_lineup(browser)
    css(browser, "#chat-image").send_keys(str(picture))
    send_chat(browser, "what is this?")
    wait(browser, lambda b: "stop" in css(b, "#chat-log .msg.assistant .tele").text)
    assert css(browser, "#chat-log .msg.user img.thumb").get_attribute("src") == f"data:image/png;base64,{PNG_1X1}"
    assert css(browser, "#chat-log .msg.assistant .answer").text
    assert css(browser, "#chat-image").get_attribute("value") == ""


def test_thoughts_are_shown_apart_from_the_answer(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    Select(css(browser, "#chat-thinking")).select_by_value("low")
    send_chat(browser, "think first")
    wait(browser, lambda b: "stop" in css(b, "#chat-log .msg.assistant .tele").text)
    thoughts = css(browser, "#chat-log .msg.assistant .thoughts")
    answer = css(browser, "#chat-log .msg.assistant .answer")
    assert thoughts.is_displayed() and thoughts.text.startswith("Thoughts\nthinking:")
    assert answer.text and "thinking" not in answer.text
    shot("chat-thoughts")


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


def test_voice_turn_from_a_recording(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    tab(browser, "voice")
    css(browser, "#voice-record").click()
    wait(browser, lambda b: css(b, "#voice-record").text == "■ Stop recording")
    time.sleep(1.0)  # a second of the synthetic microphone's tone
    css(browser, "#voice-record").click()
    wait(browser, lambda b: "kept" in css(b, "#voice-record").text)
    css(browser, "#voice-run").click()
    wait(browser, lambda b: css(b, '#voice-steps li[data-step="speech"]').get_attribute("class") == "done")
    heard = css(browser, '#voice-steps li[data-step="transcription"] .out').text
    size = int(heard.removeprefix("fake transcript of ").removesuffix(" bytes"))
    assert size > 44 + 16000  # a 16 kHz 16-bit WAV of at least half a second
    assert (size - 44) % 2 == 0


def test_kv_parking_is_switched_from_the_visualizer(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    wait(browser, lambda b: css(b, "#kv-cap").get_attribute("value"))
    css(browser, "#kv-enabled").click()
    cap = css(browser, "#kv-cap")
    cap.clear()
    cap.send_keys("1.5")
    css(browser, "#kv-apply").click()
    wait(browser, lambda b: httpx.get(f"{server}/v1/memory/kv-park").json()["enabled"])
    assert httpx.get(f"{server}/v1/memory/kv-park").json()["max_bytes"] == int(1.5 * 2**30)
    assert httpx.post(f"{server}/v1/memory/kv-park", json={"enabled": False}).json()["enabled"] is False


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


# Document conversion and entity extraction are answered in the page by the spec's own examples (sections 12, 13):
# these panels are written against the wire format while the engines are built elsewhere.
STUB_FETCH = """
const [path, events, delay] = arguments;
const original = window.fetch;
window.sent = null;
window.fetch = async (url, init) => {
  if (String(url) !== path) return original(url, init);
  window.sent = init.body instanceof FormData
    ? Object.fromEntries([...init.body.entries()].map(([k, v]) => [k, String(v.name || v)]))
    : JSON.parse(init.body);
  if (!Array.isArray(events)) {
    return new Response(JSON.stringify(events), {headers: {"content-type": "application/json"}});
  }
  const encoder = new TextEncoder();
  const body = new ReadableStream({async start(controller) {
    for (const event of [...events, "[DONE]"]) {
      controller.enqueue(encoder.encode(`data: ${typeof event === "string" ? event : JSON.stringify(event)}\\n\\n`));
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
    controller.close();
  }});
  return new Response(body, {headers: {"content-type": "text/event-stream"}});
};
"""


def _page(number: int) -> dict[str, Any]:
    return {
        "object": "document.page",
        "page": number,
        "markdown": f"## Page {number}\n\nText of page {number}.",
        "pictures": 0,
        "tables": 1,
        "ms": 310.4,
    }


def test_document_pages_appear_as_they_stream(browser: Any, full_server: str, shot: Any, tmp_path: Path) -> None:
    source = tmp_path / "report.pdf"
    source.write_bytes(b"%PDF-1.7 stand-in")
    events = [
        {"object": "document.started", "page_count": 12, "pages": [2, 3]},
        _page(2),
        _page(3),
        {
            "object": "document",
            "model": "fake-docs",
            "page_count": 12,
            "pages": [],
            "markdown": "…",
            "usage": {"pages": 2, "pictures": 0, "tables": 2, "pictures_described": 0},
            "hypnos_telemetry": {"inference_latency_ms": 620.8, "engine": {"pages": 2, "ms_per_page": 310.4}},
        },
    ]
    open_page(browser, full_server)
    wait_lineup(browser)
    tab(browser, "documents")
    browser.execute_script(STUB_FETCH, "/v1/documents/convert", events, 1500)
    css(browser, "#documents-file").send_keys(str(source))
    css(browser, "#documents-pages").send_keys("2-3")
    css(browser, "#documents-run").click()
    pages = "return [...document.querySelectorAll('#documents-pages-out .doc-page')].map(p => p.dataset.page)"
    assert wait(browser, lambda b: b.execute_script(pages)) == ["2"]  # the first page shows before the second exists
    wait(browser, lambda b: b.execute_script(pages) == ["2", "3"])
    wait(browser, lambda b: css(b, "#documents-status").text.startswith("done"))
    assert css(browser, "#documents-status").text == "done: 2 pages, 2 tables, 0 pictures"
    assert css(browser, '.doc-page[data-page="3"] pre').text == "## Page 3\n\nText of page 3."
    assert "310 ms/page" in css(browser, "#documents-tele").text
    sent = browser.execute_script("return window.sent")
    assert sent == {"model": "fake-docs", "file": "report.pdf", "ocr": "true", "stream": "true", "pages": "2-3"}
    shot("documents")


def test_a_document_stream_error_is_shown(browser: Any, full_server: str, tmp_path: Path) -> None:
    source = tmp_path / "broken.pdf"
    source.write_bytes(b"not a pdf")
    events = [{"object": "error", "error": {"message": "docling could not read page 4", "type": "server_error"}}]
    open_page(browser, full_server)
    wait_lineup(browser)
    tab(browser, "documents")
    browser.execute_script(STUB_FETCH, "/v1/documents/convert", events, 10)
    css(browser, "#documents-file").send_keys(str(source))
    css(browser, "#documents-run").click()
    error = wait(browser, lambda b: css(b, "#documents-error").is_displayed() and css(b, "#documents-error"))
    assert error.find_element(By.CSS_SELECTOR, ".error-message").text == "docling could not read page 4"


def test_entities_are_highlighted_at_code_point_offsets(browser: Any, full_server: str, shot: Any) -> None:
    text = "😀 Mario Rossi works in Milan for Ferrari."
    answer = {
        "object": "list",
        "model": "fake-ner",
        "data": [
            {
                "object": "entities",
                "index": 0,
                "entities": [
                    {"text": "Mario Rossi", "label": "person", "start": 2, "end": 13, "score": 0.97},
                    {"text": "Milan", "label": "city", "start": 23, "end": 28, "score": 0.93},
                    {"text": "Ferrari", "label": "company", "start": 33, "end": 40, "score": 0.91},
                ],
            }
        ],
        "usage": {"texts": 1, "characters": 41},
    }
    open_page(browser, full_server)
    wait_lineup(browser)
    tab(browser, "entities")
    browser.execute_script(STUB_FETCH, "/v1/entities", answer, 0)
    box = css(browser, "#entities-text")
    browser.execute_script("arguments[0].value = arguments[1]", box, text)
    css(browser, "#entities-run").click()
    wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#entities-out mark"))
    marks = browser.execute_script(
        "return [...document.querySelectorAll('#entities-out mark')]"
        ".map(m => [m.firstChild.textContent, m.dataset.label])"
    )
    assert marks == [["Mario Rossi", "person"], ["Milan", "city"], ["Ferrari", "company"]]
    assert browser.execute_script("return window.sent") == {
        "model": "fake-ner",
        "input": text,
        "labels": ["person", "city", "company", "product"],
        "threshold": 0.5,
    }
    shot("entities")
