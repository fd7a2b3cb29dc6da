"""The playground's browser kit: Debian's headless Chromium driven by Selenium, real servers over the fake engine."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypnos_server.testing import live_server

sys.path.insert(0, str(Path(__file__).parent))

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
API_KEY = "playground-key"
SCREENSHOTS = Path(os.environ.get("HYPNOS_PLAYGROUND_SCREENSHOTS", "/tmp/hypnos-playground"))

# Documents and entities are left out on purpose: their panels must show as not served.
LINEUP = """
[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"
modalities = ["vision"]
[models.fake]
tokens = 30
token_ms = 60

[[models]]
id = "fake-stt"
modality = "speech_to_text"
engine = "fake"

[[models]]
id = "fake-tts"
modality = "text_to_speech"
engine = "fake"
[models.fake]
voices = ["af_heart", "bf_emma", "am_adam"]

[[models]]
id = "fake-embed"
modality = "embeddings"
engine = "fake"

[[models]]
id = "fake-image"
modality = "image_generation"
engine = "fake"
"""

# The document and entity models of a fuller lineup (their panels are tested against the spec's wire format).
MORE_MODELS = """
[[models]]
id = "fake-docs"
modality = "document_conversion"
engine = "fake"

[[models]]
id = "fake-ner"
modality = "entity_extraction"
engine = "fake"
"""

BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1500,1000",
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-device-for-media-stream",  # a synthetic microphone for the recording test
    "--use-fake-ui-for-media-stream",
]


def _serve(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str], lineup: str = LINEUP) -> Iterator[str]:
    config = tmp_path_factory.mktemp("playground") / "hypnos.toml"
    config.write_text(lineup)
    with live_server(config, env={"HYPNOS_PLUGINS": "fake", **env}, ready_timeout=90) as base:
        yield base


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `hypnos serve` with the fake lineup and no API keys."""
    yield from _serve(tmp_path_factory, {"HYPNOS_API_KEYS": ""})


@pytest.fixture(scope="session")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same lineup with an API key configured."""
    yield from _serve(tmp_path_factory, {"HYPNOS_API_KEYS": API_KEY})


@pytest.fixture(scope="session")
def full_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The lineup plus a document converter and an entity extractor, no keys."""
    yield from _serve(tmp_path_factory, {"HYPNOS_API_KEYS": ""}, LINEUP + MORE_MODELS)


# No chat model: the page must open on the first modality it serves (Images), not on a struck-through Chat.
CHATLESS = """
[[models]]
id = "fake-image"
modality = "image_generation"
engine = "fake"

[[models]]
id = "fake-embed"
modality = "embeddings"
engine = "fake"
"""


@pytest.fixture(scope="session")
def chatless_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An image model and an embedder, no chat model, no keys."""
    yield from _serve(tmp_path_factory, {"HYPNOS_API_KEYS": ""}, CHATLESS)


@pytest.fixture(scope="session")
def empty_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with a config that names no model."""
    yield from _serve(tmp_path_factory, {"HYPNOS_API_KEYS": ""}, "")


@pytest.fixture
def api_key() -> str:
    """The key `keyed_server` accepts."""
    return API_KEY


@contextlib.contextmanager
def chromium(*flags: str, network_log: bool = False) -> Iterator[object]:
    """Headless Chromium from Debian's packages in a new empty profile (never a downloaded browser), with `flags`;
    `network_log` keeps DevTools' network events (driver.get_log("performance"))."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(path)]
    assert not missing, f"install Debian's chromium and chromium-driver (missing {missing}); ./run.sh test does"
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or a driver
    profile = tempfile.mkdtemp(prefix="hypnos-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*BROWSER_FLAGS, *flags, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if network_log else {})})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """The shared headless Chromium (its microphone: Chromium's synthetic beeps)."""
    with chromium() as driver:
        yield driver


@pytest.fixture
def shot(browser: object, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Save a screenshot of the page as a test artefact: shot("chat") -> <SCREENSHOTS>/chat.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        browser.save_screenshot(str(path))  # type: ignore[attr-defined]
        return path

    return take
