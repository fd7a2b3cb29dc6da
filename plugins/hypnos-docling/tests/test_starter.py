"""The starter lineup (`hypnos starter`, what ./run.sh serves) holds a document model that reads scans offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
from hypnos_docling import testing
from hypnos_docling.testing import convert


def test_starter_config_serves_a_document_model_that_reads_a_scan(tmp_path: Path) -> None:
    from hypnos_server.testing import live_server

    config = tmp_path / "starter.toml"
    code = "import sys; from hypnos_server.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", code, "starter", "--models-dir", str(tmp_path / "models"), "--out", str(config)]
    subprocess.run(command, check=True, capture_output=True)
    assert 'engine = "docling"' in config.read_text()
    with live_server(config) as url, httpx.Client(base_url=url, timeout=300) as http:
        answer = convert(http, testing.scanned_pdf(), "scan.pdf")
    assert "INVOICE" in answer["markdown"] and "TOTAL" in answer["markdown"]
