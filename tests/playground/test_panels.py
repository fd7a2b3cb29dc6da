"""The other modalities: images, embeddings, documents and entities (the voice tab: test_voice.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_kit import STUB_FETCH, css, open_page, tab, wait, wait_lineup
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select


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
    assert not css(browser, "#documents-copy").is_displayed()  # nothing to copy before a conversion
    assert not css(browser, "#documents-download").is_displayed()
    browser.execute_script(STUB_FETCH, "/v1/documents/convert", events, 1500)
    css(browser, "#documents-file").send_keys(str(source))
    css(browser, "#documents-pages").send_keys("2-3")
    css(browser, "#documents-run").click()
    pages = "return [...document.querySelectorAll('#documents-pages-out .doc-page')].map(p => p.dataset.page)"
    assert wait(browser, lambda b: b.execute_script(pages)) == ["2"]  # the first page shows before the second exists
    wait(browser, lambda b: b.execute_script(pages) == ["2", "3"])
    wait(browser, lambda b: css(b, "#documents-status").text.startswith("done"))
    assert css(browser, "#documents-status").text == "done: 2 pages, 2 tables, 0 pictures"
    assert css(browser, '.doc-page[data-page="3"] h2').text == "Page 3"
    assert css(browser, '.doc-page[data-page="3"] p').text == "Text of page 3."
    assert "310 ms/page" in css(browser, "#documents-tele").text
    assert css(browser, "#documents-copy").is_displayed() and css(browser, "#documents-download").is_displayed()
    sent = browser.execute_script("return window.sent")
    assert sent == {
        "model": "fake-docs",
        "file": "report.pdf",
        "ocr": "true",
        "stream": "true",
        "pages": "2-3",
        "return_pictures": "true",
    }
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
