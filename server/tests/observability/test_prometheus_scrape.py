"""A real Prometheus scrapes the real server: the target is up, the samples land, the Content-Type is accepted."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from hypnos_server.testing import free_port, live_server, stop_process

PROMETHEUS = shutil.which("prometheus")

CONFIG = """
[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"
"""

# Only this one test needs the binary (Debian's `prometheus` package); the exact header is tested in test_app.py.
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (apt-get install prometheus)")


def scraped_target(api: str, deadline: float) -> dict:
    """The one active target once Prometheus has scraped it (its lastScrape set)."""
    while time.monotonic() < deadline:
        try:
            targets = httpx.get(f"{api}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
        except (httpx.HTTPError, KeyError, ValueError):
            targets = []
        if targets and targets[0].get("health") in ("up", "down"):
            return targets[0]
        time.sleep(0.5)
    raise AssertionError("Prometheus never scraped the server")


def test_prometheus_scrapes_hypnos_and_parses_its_content_type(tmp_path: Path) -> None:
    config = tmp_path / "hypnos.toml"
    config.write_text(CONFIG)
    with live_server(config, env={"HYPNOS_PLUGINS": "fake"}, ready_timeout=60) as base:
        target = base.removeprefix("http://")
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: hypnos\n    static_configs:\n      - targets: ['{target}']\n"
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        process = subprocess.Popen(
            [PROMETHEUS or "prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--log.level=debug"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            api = f"http://127.0.0.1:{port}"
            scraped = scraped_target(api, time.monotonic() + 60)
            assert scraped["health"] == "up", scraped.get("lastError")
            query = httpx.get(f"{api}/api/v1/query", params={"query": "hypnos_uptime_seconds"}, timeout=5).json()
            assert query["data"]["result"], query
        finally:
            stop_process(process)
            log.close()
    # Prometheus 2 falls back to its text parser on a Content-Type it cannot parse (Prometheus 3 fails the scrape),
    # logging it at debug level: the header must parse as it is
    output = (tmp_path / "prometheus.log").read_text(errors="replace")
    assert "Invalid content type" not in output and "invalid content type" not in output.lower(), output[-2000:]
