"""/docs: the API reference renders in Chromium from the server's own files, every request staying on this server,
with no Content-Security-Policy violation."""

from __future__ import annotations

import json
from typing import Any

from browser_kit import css, wait
from conftest import SCREENSHOTS, chromium
from selenium.webdriver.common.by import By


def requested_urls(driver: Any) -> list[str]:
    """Every URL the page asked for (DevTools' Network.requestWillBeSent events)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_the_reference_renders_every_route_from_this_server_only(server: str) -> None:
    with chromium(network_log=True) as driver:
        driver.get(f"{server}/docs")
        wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")) > 20)
        paths = {e.text.replace("\u200b", "") for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
        assert {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/rerank", "/v1/models"} <= paths
        css(driver, ".opblock-summary-path").click()  # an operation opens with its description
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-body"))
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / "docs.png"))
        urls = [url for url in requested_urls(driver) if url.split(":", 1)[0] in ("http", "https", "ws", "wss")]
        assert f"{server}/schema/openapi.json" in urls
        assert [url for url in urls if not url.startswith(f"{server}/")] == []  # nothing left the machine
        problems = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert problems == []  # no CSP violation, no failed load
