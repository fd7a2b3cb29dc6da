"""Helpers of the playground's browser tests: waits, lookups, the chat composer, a fetch stub for spec examples."""

from __future__ import annotations

from typing import Any

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

TIMEOUT = 30


def wait(browser: Any, condition: Any, timeout: float = TIMEOUT) -> Any:
    """The first truthy value of condition(browser) within the timeout."""
    return WebDriverWait(browser, timeout, poll_frequency=0.05).until(condition)


def css(browser: Any, selector: str) -> Any:
    """The element the CSS selector finds."""
    return browser.find_element(By.CSS_SELECTOR, selector)


def open_page(browser: Any, base: str) -> None:
    """Load `/` with an empty session storage (no key kept from an earlier test)."""
    browser.get(f"{base}/")
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{base}/")


def wait_lineup(browser: Any) -> None:
    """Wait until the lineup (from /v1/memory/status) has filled the chat model picker."""
    wait(browser, lambda b: css(b, "#chat-model").get_attribute("value") == "fake-chat")


def tab(browser: Any, name: str) -> None:
    """Switch to a panel's tab."""
    css(browser, f'#tabs button[data-tab="{name}"]').click()


def send_chat(browser: Any, text: str) -> None:
    """Type a chat message and send it with Enter."""
    box = css(browser, "#chat-input")
    box.clear()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def last_answer(browser: Any) -> Any:
    """The newest assistant message of the chat."""
    return browser.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")[-1]


def log_rows(browser: Any) -> list[list[str]]:
    """The request log table's cells (read in one go: the table is redrawn every poll)."""
    return browser.execute_script(  # type: ignore[no-any-return]
        "return [...document.querySelectorAll('#log-table tbody tr:not(.detail)')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )


def status_of(base: str, model: str, key: str | None = None) -> dict[str, Any]:
    """One model's entry of GET /v1/memory/status, read by the test itself (not through the page)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    models = httpx.get(f"{base}/v1/memory/status", headers=headers).json()["models"]
    return next(m for m in models if m["id"] == model)


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


def set_viewport(browser: Any, width: int, height: int) -> None:
    """Emulate a viewport of exactly width x height CSS pixels (a phone's when narrow: its viewport meta applies)."""
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def reset_viewport(browser: Any) -> None:
    """Back to the browser window's own size."""
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# [what, right edge, the right edge it must stay within] for every element the layout must keep in view.
CLIPPED = """
const limit = document.documentElement.clientWidth;
const inside = (selector, box) => [...document.querySelectorAll(selector)]
  .filter((node) => node.getClientRects().length)
  .map((node) => [selector + " " + node.textContent.trim().slice(0, 20), node.getBoundingClientRect().right,
                   Math.min(limit, document.querySelector(box).getBoundingClientRect().right)]);
return [
  ...inside("#tier-models .toggle", "#tiers"), ...inside("#tier-models th", "#tiers"),
  ...inside("#log-table th", "#log"), ...inside("#log-table tbody td", "#log"),
  ...inside("#tabs button", "#work"), ...inside(".panel:not([hidden]) button", "#work"),
  ...inside("header button", "header"),
].filter(([, right, edge]) => right > edge + 0.5);
"""


def overflow(browser: Any) -> dict[str, Any]:
    """The page's scroll width against its client width, and the elements cut off at their box's right edge."""
    widths = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    return {"scroll": widths[0], "client": widths[1], "clipped": browser.execute_script(CLIPPED)}


# Several routes answered in the page (the rest go to the server): {path: {"events": [...], "delay": ms}} streams SSE,
# {"json": value} answers JSON, {"png": base64} answers image bytes. window.sentTo[path] keeps each request's body.
STUB_ROUTES = """
const routes = arguments[0];
const original = window.fetch;
window.sentTo = {};
window.fetch = async (url, init = {}) => {
  const path = String(url);
  const route = routes[path];
  if (!route) return original(url, init);
  const body = init.body instanceof FormData
    ? Object.fromEntries([...init.body.entries()].map(([k, v]) => [k, String(v.name || v)]))
    : init.body ? JSON.parse(init.body) : null;
  (window.sentTo[path] = window.sentTo[path] || []).push(body);
  if (route.png) {
    const bytes = Uint8Array.from(atob(route.png), (c) => c.charCodeAt(0));
    return new Response(bytes, {headers: {"content-type": "image/png"}});
  }
  if (!route.events) return new Response(JSON.stringify(route.json), {headers: {"content-type": "application/json"}});
  const encoder = new TextEncoder();
  const stream = new ReadableStream({async start(controller) {
    for (const event of [...route.events, "[DONE]"]) {
      if (init.signal && init.signal.aborted) { controller.error(new DOMException("aborted", "AbortError")); return; }
      controller.enqueue(encoder.encode(`data: ${typeof event === "string" ? event : JSON.stringify(event)}\\n\\n`));
      await new Promise((resolve) => setTimeout(resolve, route.delay || 0));
    }
    controller.close();
  }});
  return new Response(stream, {headers: {"content-type": "text/event-stream"}});
};
"""

# Downloads and copies the page makes, kept instead of done: window.downloads [{name, href}], window.copied, and
# window.blobs[href] (the saved Blob: the CSP's connect-src keeps fetch() off blob: URLs).
CATCH_SAVES = """
window.downloads = [];
window.copied = null;
window.blobs = {};
const objectUrl = URL.createObjectURL;
URL.createObjectURL = (blob) => { const url = objectUrl(blob); window.blobs[url] = blob; return url; };
HTMLAnchorElement.prototype.click = function () {
  if (this.download) window.downloads.push({name: this.download, href: this.href});
};
Object.defineProperty(navigator, "clipboard", {value: {writeText: async (text) => { window.copied = text; }}});
"""

READ_DOWNLOAD = """
const done = arguments[arguments.length - 1];
window.blobs[arguments[0]].arrayBuffer().then((b) => done(Array.from(new Uint8Array(b))));
"""


def chat_chunks(*pieces: str, finish: str = "stop") -> list[dict[str, Any]]:
    """The SSE chunks of a streamed chat answer made of `pieces`, then its finish reason."""
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "fake-chat"}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    return [*chunks, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]


# Requests the page sends to these paths, recorded on their way to the server: window.spied[path] = [JSON body, ...].
SPY_FETCH = """
const paths = arguments[0];
const original = window.fetch;
window.spied = {};
window.fetch = async (url, init = {}) => {
  const path = String(url);
  if (paths.includes(path)) (window.spied[path] = window.spied[path] || []).push(JSON.parse(init.body));
  return original(url, init);
};
"""
