"""The page's layout at a laptop's 1400 px and a phone's 390 px: nothing cut off, no horizontal scrolling."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser_kit import css, open_page, overflow, reset_viewport, set_viewport, tab, wait, wait_lineup
from selenium.webdriver.common.by import By

SIZES = [(1400, 1000), (390, 844)]
TABS = ["chat", "voice", "images", "documents", "entities", "embeddings"]


@pytest.fixture
def sized(browser: Any, request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    """The browser at the viewport size of the test's parameter, back to its own size afterwards."""
    width, height = request.param
    set_viewport(browser, width, height)
    try:
        yield width, height
    finally:
        reset_viewport(browser)


@pytest.mark.parametrize("sized", SIZES, indirect=True, ids=[f"{w}x{h}" for w, h in SIZES])
def test_no_horizontal_overflow(browser: Any, full_server: str, sized: tuple[int, int], shot: Any) -> None:
    width, height = sized
    chat = {"model": "fake-chat", "messages": [{"role": "user", "content": "a long enough question"}]}
    assert httpx.post(f"{full_server}/v1/chat/completions", json=chat).status_code == 200
    for action in ("disable", "enable"):
        assert httpx.post(f"{full_server}/v1/models/fake-embed/{action}").status_code == 200
    open_page(browser, full_server)
    wait_lineup(browser)
    wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#log-table tbody tr")) >= 3)
    wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#tier-models .toggle")) == 7)
    assert browser.execute_script("return window.innerWidth") == width
    for name in TABS:
        tab(browser, name)
        assert css(browser, f"#panel-{name}").is_displayed()
        measured = overflow(browser)
        shot(f"layout-{width}x{height}-{name}")
        assert measured["scroll"] <= measured["client"], (name, measured)
        assert measured["clipped"] == [], name
