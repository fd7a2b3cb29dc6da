"""The tier visualizer and the request log: moves, enable and disable, KV parking, the log's telemetry."""

from __future__ import annotations

import time
from typing import Any

import httpx
from browser_kit import css, log_rows, open_page, send_chat, status_of, wait, wait_lineup
from selenium.webdriver.common.by import By


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


ANIMATED = "return document.querySelector('#tier-models tr[data-model=\"fake-embed\"]').getAnimations().length"


def test_a_model_that_changed_tier_is_highlighted_once(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    start = status_of(server, "fake-embed")["current_tier"]
    target = "tier2_pinned_ram" if start != "tier2_pinned_ram" else "tier1_gpu_vram"
    moved = httpx.post(f"{server}/v1/memory/tier", json={"model": "fake-embed", "target_tier": target})
    assert moved.status_code == 200
    wait(browser, lambda b: b.execute_script(ANIMATED) == 1)  # the change is highlighted...
    time.sleep(2.0)  # ...for 1.6 s
    playing = []
    for _ in range(12):  # then over three polls of the status, never again
        playing.append(browser.execute_script(ANIMATED))
        time.sleep(0.25)
    assert playing == [0] * 12
    assert "moved" not in css(browser, '#tier-models tr[data-model="fake-embed"]').get_attribute("class")


def test_a_model_that_fails_to_load_shows_why_in_its_row(browser: Any, server: str) -> None:
    block = '[[models]]\nid = "fake-broken"\nmodality = "text_generation"\nengine = "fake"\n'
    block += "[models.fake]\nfail_load = true\n"
    assert httpx.post(f"{server}/v1/models", json={"config": block}).status_code == 201
    try:
        chat = {"model": "fake-broken", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{server}/v1/chat/completions", json=chat, timeout=30).status_code >= 500
        reason = status_of(server, "fake-broken")["unavailable_reason"]
        assert reason
        open_page(browser, server)
        wait_lineup(browser)
        cell = '#tier-models tr[data-model="fake-broken"] .reason'
        wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, cell) and css(b, cell).is_displayed())
        assert css(browser, cell).text.startswith(reason.split(";")[0][:40])
        assert "failing" in css(browser, '#tier-models tr[data-model="fake-broken"]').get_attribute("class")
        assert not css(browser, '#tier-models tr[data-model="fake-embed"] .reason').is_displayed()
    finally:
        httpx.delete(f"{server}/v1/models/fake-broken")


def test_disabling_a_model_disables_its_panel(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    assert httpx.delete(f"{server}/v1/logs").json() == {"cleared": True}
    toggle = '#tier-models tr[data-model="fake-image"] .toggle'
    wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, toggle))[0].click()
    # the first click only asks: nothing is sent until the second one
    wait(browser, lambda b: css(b, toggle).text == "Really disable?")
    assert status_of(server, "fake-image")["enabled"] is True
    assert "unserved" not in css(browser, '#tabs button[data-tab="images"]').get_attribute("class")
    css(browser, toggle).click()
    wait(browser, lambda b: "unserved" in css(b, '#tabs button[data-tab="images"]').get_attribute("class"))
    assert status_of(server, "fake-image")["enabled"] is False
    assert css(browser, "#panel-images fieldset").get_attribute("disabled") is not None
    assert css(browser, toggle).text == "Enable"
    css(browser, toggle).click()  # enabling needs no second click
    wait(browser, lambda b: "unserved" not in css(b, '#tabs button[data-tab="images"]').get_attribute("class"))
    assert status_of(server, "fake-image")["enabled"] is True
    # the log names the model each call acted on, beside the route template
    rows = wait(browser, lambda b: [r[1:3] for r in log_rows(b) if r[1].startswith("/v1/models/")] or None)
    assert sorted(rows) == [
        ["/v1/models/{model_id}/disable", "fake-image"],
        ["/v1/models/{model_id}/enable", "fake-image"],
    ]


def test_an_armed_disable_lapses(browser: Any, server: str) -> None:
    open_page(browser, server)
    wait_lineup(browser)
    toggle = '#tier-models tr[data-model="fake-embed"] .toggle'
    wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, toggle))[0].click()
    wait(browser, lambda b: css(b, toggle).text == "Really disable?")
    wait(browser, lambda b: css(b, toggle).text == "Disable", timeout=10)  # unconfirmed, it goes back
    css(browser, toggle).click()
    wait(browser, lambda b: css(b, toggle).text == "Really disable?")
    assert status_of(server, "fake-embed")["enabled"] is True


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
