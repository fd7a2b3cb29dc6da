"""The chat panel: the streamed answer, thoughts apart from it, tool calls and their results, an attached image."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
from browser_kit import SPY_FETCH, css, last_answer, open_page, send_chat, wait, wait_lineup
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


def _set(browser: Any, field: str, value: str) -> None:
    box = css(browser, field)
    box.clear()
    box.send_keys(value)


def _answered(browser: Any) -> str:
    wait(browser, lambda b: not b.find_elements(By.CSS_SELECTOR, "#chat-log .answer.streaming"))
    wait(
        browser,
        lambda b: last_answer(b).find_element(By.CSS_SELECTOR, ".tele").text.split(" ")[0] in ("stop", "length"),
    )
    return last_answer(browser).find_element(By.CSS_SELECTOR, ".answer").text  # type: ignore[no-any-return]


def _expected(server: str, body: dict[str, Any]) -> str:
    return httpx.post(f"{server}/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]  # type: ignore[no-any-return]


def test_sampling_controls_go_with_the_request(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    for field, value in (
        ("#chat-temperature", "0.7"),
        ("#chat-top-p", "0.9"),
        ("#chat-max-tokens", "6"),
        ("#chat-seed", "42"),
    ):
        _set(browser, field, value)
    browser.execute_script(SPY_FETCH, ["/v1/chat/completions"])
    send_chat(browser, "sample me")
    answer = _answered(browser)
    sent = browser.execute_script("return window.spied['/v1/chat/completions'][0]")
    assert {k: sent[k] for k in ("temperature", "top_p", "max_tokens", "seed")} == {
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 6,
        "seed": 42,
    }
    messages = [{"role": "user", "content": "sample me"}]
    assert answer == _expected(server, {"model": "fake-chat", "messages": messages, "max_tokens": 6, "seed": 42})
    _set(browser, "#chat-seed", "")  # an empty field sends nothing (the model's default)
    send_chat(browser, "again")
    wait(browser, lambda b: len(b.execute_script("return window.spied['/v1/chat/completions']")) == 2)
    assert "seed" not in browser.execute_script("return window.spied['/v1/chat/completions'][1]")


def test_stop_ends_the_answer_where_it_got(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    send_chat(browser, "a long answer please")
    wait(browser, lambda b: len(last_answer(b).find_element(By.CSS_SELECTOR, ".answer").text.split()) >= 3)
    css(browser, "#chat-stop").click()
    wait(browser, lambda b: last_answer(b).find_element(By.CSS_SELECTOR, ".tele").text == "stopped")
    partial = last_answer(browser).find_element(By.CSS_SELECTOR, ".answer").text
    full = _expected(server, {"model": "fake-chat", "messages": [{"role": "user", "content": "a long answer please"}]})
    assert full.startswith(partial) and len(partial.split()) < len(full.split())
    assert css(browser, "#chat-stop").get_attribute("disabled") is not None
    assert css(browser, "#chat-send").get_attribute("disabled") is None


def test_regenerate_answers_the_last_message_again(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    assert css(browser, "#chat-regenerate").get_attribute("disabled") is not None  # nothing to answer again yet
    _set(browser, "#chat-max-tokens", "8")
    send_chat(browser, "hello")
    first = _answered(browser)
    _set(browser, "#chat-seed", "5")
    browser.execute_script(SPY_FETCH, ["/v1/chat/completions"])
    css(browser, "#chat-regenerate").click()
    wait(browser, lambda b: b.execute_script("return window.spied['/v1/chat/completions']"))
    second = _answered(browser)
    sent = browser.execute_script("return window.spied['/v1/chat/completions'][0]")
    assert sent["messages"] == [{"role": "user", "content": "hello"}]  # the old answer is not sent back
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")) == 1
    messages = [{"role": "user", "content": "hello"}]
    assert second == _expected(server, {"model": "fake-chat", "messages": messages, "max_tokens": 8, "seed": 5})
    assert second != first


def test_the_conversation_survives_a_reload(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    Select(css(browser, "#chat-thinking")).select_by_value("low")
    send_chat(browser, "remember me")
    answer = _answered(browser)
    thoughts = css(browser, "#chat-log .msg.assistant .thoughts").text
    browser.refresh()
    wait_lineup(browser)
    shown = browser.execute_script(
        "return [...document.querySelectorAll('#chat-log .msg')]"
        ".map(m => [m.className, m.querySelector('.body').innerText])"
    )
    assert [kind for kind, _ in shown] == ["msg user", "msg assistant"]
    assert shown[0][1] == "remember me"
    assert css(browser, "#chat-log .msg.assistant .answer").text == answer
    assert css(browser, "#chat-log .msg.assistant .thoughts").text == thoughts
    Select(css(browser, "#chat-thinking")).select_by_value("")
    browser.execute_script(SPY_FETCH, ["/v1/chat/completions"])
    send_chat(browser, "and now?")
    wait(browser, lambda b: b.execute_script("return window.spied['/v1/chat/completions']"))
    sent = browser.execute_script("return window.spied['/v1/chat/completions'][0]")["messages"]
    assert sent == [
        {"role": "user", "content": "remember me"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "and now?"},
    ]
    _answered(browser)
    css(browser, "#chat-clear").click()
    browser.refresh()
    wait_lineup(browser)
    assert browser.find_elements(By.CSS_SELECTOR, "#chat-log .msg") == []
