"""The chat panel: the streamed answer, thoughts apart from it, tool calls and their results, an attached image."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
from browser_kit import css, last_answer, open_page, send_chat, wait, wait_lineup
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def test_chat_streams_the_answer(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    send_chat(browser, "hello there")
    # The answer appears piece by piece: a partial answer is on screen while the stream is still open.
    partial = wait(
        browser,
        lambda b: b.execute_script(
            "const a = document.querySelector('#chat-log .msg.assistant .answer');"
            "return a && a.classList.contains('streaming') && a.textContent.trim() ? a.textContent.trim() : null;"
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
