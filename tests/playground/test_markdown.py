"""Chat answers and converted documents shown as Markdown, sanitized (model output is untrusted), copied, saved."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

from browser_kit import (
    CATCH_SAVES,
    READ_DOWNLOAD,
    STUB_ROUTES,
    chat_chunks,
    css,
    open_page,
    send_chat,
    tab,
    wait,
    wait_lineup,
)
from selenium.webdriver.common.by import By

PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"

# What a hostile (or confused) model might write: each line tries to run script in the page.
XSS = [
    '<img src=x onerror="window.pwned = 1">',
    "[click](javascript:window.pwned=2)",
    "<script>window.pwned = 3</script>",
    '<a href="#" onclick="window.pwned = 4" id="evil">x</a>',
    '<iframe src="javascript:parent.pwned = 5"></iframe>',
    '<svg><animate onbegin="window.pwned = 6" attributeName="x"/></svg>',
    '<form action="javascript:window.pwned = 7"><button id="evil-submit">go</button></form>',
    "![tracker](http://example.invalid/pixel.png)",
]

SAFE = """
const root = arguments[0];
return {
  pwned: window.pwned ?? null,
  scripts: root.querySelectorAll("script, iframe, svg, form, button, style").length,
  handlers: [...root.querySelectorAll("*")].flatMap((n) => [...n.attributes].map((a) => a.name))
    .filter((name) => name.startsWith("on") || name === "style").length,
  jsLinks: [...root.querySelectorAll("[href], [src], [action]")]
    .map((n) => n.getAttribute("href") || n.getAttribute("src") || n.getAttribute("action"))
    .filter((url) => /^\\s*javascript:/i.test(url)).length,
  remoteImages: [...root.querySelectorAll("img")].filter((i) => /^https?:/.test(i.getAttribute("src"))).length,
};
"""


def assert_safe(browser: Any, root: Any) -> None:
    """No payload ran, and none of them left an element, handler or URL that could run later."""
    time.sleep(0.3)  # an onerror of a broken image fires asynchronously: give it the time to (not) run
    assert browser.execute_script(SAFE, root) == {
        "pwned": None,
        "scripts": 0,
        "handlers": 0,
        "jsLinks": 0,
        "remoteImages": 0,
    }


def test_a_chat_answer_is_rendered_as_sanitized_markdown(browser: Any, server: str, shot: Any) -> None:
    answer = "## Plan\n\n**Bold** and `code`:\n\n- one\n- two\n\n```python\nprint('hi')\n```\n\n" + "\n\n".join(XSS)
    open_page(browser, server)
    wait_lineup(browser)
    routes = {"/v1/chat/completions": {"events": chat_chunks(*answer.partition("- one")), "delay": 50}}
    browser.execute_script(STUB_ROUTES, routes)
    send_chat(browser, "write me some markdown")
    wait(browser, lambda b: "stop" in css(b, "#chat-log .msg.assistant .tele").text)
    rendered = css(browser, "#chat-log .msg.assistant .answer")
    assert rendered.find_element(By.CSS_SELECTOR, "h2").text == "Plan"
    assert rendered.find_element(By.CSS_SELECTOR, "strong").text == "Bold"
    assert [li.text for li in rendered.find_elements(By.CSS_SELECTOR, "ul li")] == ["one", "two"]
    assert rendered.find_element(By.CSS_SELECTOR, "pre code").text == "print('hi')"
    assert rendered.find_element(By.LINK_TEXT, "tracker").get_attribute("href") == "http://example.invalid/pixel.png"
    assert_safe(browser, rendered)
    shot("chat-markdown")


def _page(number: int, markdown: str, pictures: list[str]) -> dict[str, Any]:
    return {"object": "document.page", "page": number, "markdown": markdown, "pictures": len(pictures),
            "tables": 1, "ms": 120.0, "picture_urls": pictures}  # fmt: skip


def test_a_document_is_rendered_copied_and_saved_with_its_pictures(
    browser: Any, full_server: str, shot: Any, tmp_path: Path
) -> None:
    source = tmp_path / "report.pdf"
    source.write_bytes(b"%PDF-1.7 stand-in")
    first = "# Report\n\n| Quarter | Revenue |\n| --- | --- |\n| Q1 | 10 |\n\n<!-- image -->\n\n" + XSS[0]
    second = "## Findings\n\nMostly *fine*.\n\n" + "\n\n".join(XSS[1:])
    joined = f"{first}\n\n{second}"
    pictures = ["/v1/documents/doc-1/pictures/1", "/v1/documents/doc-1/pictures/2"]
    events = [
        {"object": "document.started", "page_count": 2, "pages": [1, 2], "id": "doc-1"},
        _page(1, first, pictures[:1]),
        _page(2, second, pictures[1:]),
        {"object": "document", "model": "fake-docs", "page_count": 2, "pages": [], "markdown": joined,
         "usage": {"pages": 2, "pictures": 2, "tables": 2, "pictures_described": 0}},
    ]  # fmt: skip
    routes: dict[str, Any] = {"/v1/documents/convert": {"events": events, "delay": 20}}
    routes.update({f"{url}?format=image": {"png": PNG_1X1} for url in pictures})
    open_page(browser, full_server)
    wait_lineup(browser)
    tab(browser, "documents")
    browser.execute_script(STUB_ROUTES, routes)
    browser.execute_script(CATCH_SAVES)
    css(browser, "#documents-file").send_keys(str(source))
    css(browser, "#documents-run").click()
    wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#documents-pictures img")) == 2)
    sent = browser.execute_script("return window.sentTo['/v1/documents/convert'][0]")
    assert sent["return_pictures"] == "true"
    page = css(browser, '.doc-page[data-page="1"] .page-markdown')
    assert page.find_element(By.CSS_SELECTOR, "h1").text == "Report"
    assert [td.text for td in page.find_elements(By.CSS_SELECTOR, "table td")] == ["Q1", "10"]
    assert css(browser, '.doc-page[data-page="2"] .page-markdown em').text == "fine"
    assert_safe(browser, css(browser, "#documents-pages-out"))
    shot("documents-markdown")

    css(browser, "#documents-copy").click()
    wait(browser, lambda b: b.execute_script("return window.copied") is not None)
    assert browser.execute_script("return window.copied") == joined
    css(browser, "#documents-download").click()
    css(browser, "#documents-download-pictures").click()
    saved = browser.execute_script("return window.downloads")
    assert [d["name"] for d in saved] == ["report.md", "report-picture-1.png", "report-picture-2.png"]
    contents = [bytes(browser.execute_async_script(READ_DOWNLOAD, d["href"])) for d in saved]
    assert contents == [joined.encode(), base64.b64decode(PNG_1X1), base64.b64decode(PNG_1X1)]
    css(browser, "#documents-pictures .picture-download").click()
    assert browser.execute_script("return window.downloads.length") == 4
