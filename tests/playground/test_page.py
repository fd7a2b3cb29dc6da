"""The page at `/`: no key to load it, /v1 guarded and never serving it, keys asked for, errors, the lineup."""

from __future__ import annotations

import http.client
from typing import Any

import httpx
from browser_kit import css, open_page, send_chat, status_of, tab, wait, wait_lineup
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys


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
    # a traversal sent as written (httpx would resolve the dots first) is a non-canonical path: 404, never the file
    host, port = keyed_server.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("GET", "/playground/../routes/playground.py")
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    assert answer.status == 404 and b"import" not in body
    assert httpx.get(f"{keyed_server}/playground/no-such-file.js").status_code == 404


def test_v1_paths_never_answer_with_the_page(server: str) -> None:
    for path in ("/v1", "/v1/", "/v1/index.html", "/v1/playground/app.js"):
        response = httpx.get(f"{server}{path}")
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("application/json")
        assert response.json()["error"]["type"] == "not_found"


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


def test_modalities_the_lineup_lacks_are_disabled(browser: Any, server: str, shot: Any) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    for name, modality in (("documents", "document_conversion"), ("entities", "entity_extraction")):
        button = css(browser, f'#tabs button[data-tab="{name}"]')
        assert "unserved" in button.get_attribute("class")
        tab(browser, name)
        assert css(browser, f"#panel-{name} fieldset").get_attribute("disabled") is not None
        notice = css(browser, f"#panel-{name} .unserved")
        assert notice.text.startswith(f"Not served by this server's lineup: no enabled model does {modality}. To use")
    assert 'engine = "docling"' in css(browser, "#panel-documents .unserved").get_attribute("textContent")
    assert "./run.sh serve --with entities" in css(browser, "#panel-entities .unserved").get_attribute("textContent")
    assert not css(browser, "#empty-banner").is_displayed()
    shot("documents-unserved")
    for name in ("chat", "voice", "images", "embeddings"):
        assert "unserved" not in css(browser, f'#tabs button[data-tab="{name}"]').get_attribute("class")


def test_without_a_chat_model_the_page_opens_on_the_first_served_tab(browser: Any, chatless_server: str) -> None:
    open_page(browser, chatless_server)
    wait(browser, lambda b: css(b, "#images-model").get_attribute("value") == "fake-image")
    wait(browser, lambda b: css(b, "#panel-images").is_displayed())
    assert css(browser, "#tabs button.active").get_attribute("data-tab") == "images"
    assert not css(browser, "#panel-chat").is_displayed()
    assert "unserved" in css(browser, '#tabs button[data-tab="chat"]').get_attribute("class")


def test_without_models_the_page_says_how_to_start(browser: Any, empty_server: str, shot: Any) -> None:
    open_page(browser, empty_server)
    wait(browser, lambda b: css(b, "#empty-banner").is_displayed())
    assert "./run.sh" in css(browser, "#empty-banner").text and "hypnos add" in css(browser, "#empty-banner").text
    assert "hypnos pull" in css(browser, "#panel-chat .unserved").text
    shot("no-models")


def test_with_a_chat_model_the_page_opens_on_chat(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    assert css(browser, "#tabs button.active").get_attribute("data-tab") == "chat"
    assert css(browser, "#panel-chat").is_displayed()


def test_the_page_runs_under_its_content_security_policy(browser: Any, server: str) -> None:
    page = httpx.get(f"{server}/")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    browser.get_log("browser")  # drop what earlier tests left
    open_page(browser, server)
    wait_lineup(browser)
    widths = "return [...document.querySelectorAll('.tier .seg')].map(s => s.style.width)"
    assert all(width.endswith("%") for width in wait(browser, lambda b: b.execute_script(widths)))
    refused = [
        entry["message"] for entry in browser.get_log("browser") if "Content Security Policy" in entry["message"]
    ]
    assert refused == []
