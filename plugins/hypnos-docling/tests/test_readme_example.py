"""The root README's document conversion examples (curl and Python, marked `# plugin: hypnos-docling`) run against a
real server with the docling engine and print the Markdown of the document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypnos_docling import testing

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = "hypnos-docling"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A keyless server whose `docling` model is the README's, and a folder holding the README's `report.pdf`."""
    from hypnos_server.testing import live_server

    folder = tmp_path_factory.mktemp("readme")
    config = folder / "hypnos.toml"
    config.write_text(
        f'models_dir = "{folder}"\n\n[[models]]\nid = "docling"\nmodality = "document_conversion"\n'
        'engine = "docling"\n',
        encoding="utf-8",
    )
    work = folder / "work"
    work.mkdir()
    (work / "report.pdf").write_bytes(testing.report_pdf(pages=2, picture=False, table=False))
    with live_server(config) as base:
        yield base, work


def assert_the_report(markdown: str) -> None:
    """The Markdown of report.pdf: both pages' headings and text."""
    for line in ("Chapter 1: Results", "Chapter 2: Results", "Page 2 opens with a short paragraph"):
        assert line in markdown, markdown


def test_the_curl_example_converts_the_report(served: tuple[str, Path]) -> None:
    from hypnos_server.testing import readme_example_output

    base, work = served
    output = readme_example_output(ROOT / "README.md", "bash", PLUGIN, base, work)
    answer = json.loads(output)
    assert answer["object"] == "document" and answer["page_count"] == 2
    assert_the_report(answer["markdown"])


def test_the_python_example_prints_the_markdown(served: tuple[str, Path]) -> None:
    from hypnos_server.testing import readme_example_output

    base, work = served
    output = readme_example_output(ROOT / "README.md", "python", PLUGIN, base, work)
    assert_the_report(output)
