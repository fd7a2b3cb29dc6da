"""The page's layout at a laptop's 1400x900, a tablet's 820 px and a phone's 390 px: nothing cut off, no horizontal
scrolling, the tiers and the request log in view."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser_kit import css, open_page, overflow, reset_viewport, set_viewport, tab, wait, wait_lineup
from selenium.webdriver.common.by import By

SIZES = [(1400, 900), (820, 1180), (390, 844)]
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


BOX = "const r = document.querySelector(arguments[0]).getBoundingClientRect(); return [r.top, r.bottom, r.height];"


@pytest.mark.parametrize("sized", SIZES, indirect=True, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_tiers_and_the_log_stay_in_view(browser: Any, full_server: str, sized: tuple[int, int], shot: Any) -> None:
    width, height = sized
    for _ in range(12):  # a long request log
        chat = {"model": "fake-chat", "messages": [{"role": "user", "content": "fill the log"}], "max_tokens": 2}
        assert httpx.post(f"{full_server}/v1/chat/completions", json=chat).status_code == 200
    open_page(browser, full_server)
    wait_lineup(browser)
    wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#log-table tbody tr")) >= 10)
    tiers, log, work = (browser.execute_script(BOX, s) for s in ("#tiers", "#log .log-scroll", "#work"))
    busy = browser.find_elements(By.CSS_SELECTOR, "#tier-models .busy-cell")
    assert busy and all(cell.is_displayed() for cell in busy)  # the "leased" column at every size
    if width >= 1001:  # beside the work area, both on the first screen
        assert tiers[0] < height and log[0] < height - 120 and min(log[1], height) - log[0] >= 120, (tiers, log)
    else:  # one column: the tiers before the work area, the log after it
        assert tiers[0] < work[0] < log[0], (tiers, work, log)
        assert tiers[0] < height
    shot(f"in-view-{width}x{height}")
