"""Office and OpenDocument files made by LibreOffice itself (tests/office/make.sh, from the flat OpenDocument sources
beside them) converted by the real server: slides' titles as headings, sheets' cells as tables, text holding `<`
and `>` read back as that text, pictures with a box and a page size."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypnos_docling.testing import convert

sys.path.insert(0, str(Path(__file__).parent))

from markdown_check import problems, rendered_text

OFFICE = Path(__file__).parent / "office"
TITLES = ["# Quarterly Results", "# Regional Breakdown", "# Next Steps"]
ROWS = [["Region", "Units", "Revenue"], ["North", "3400", "51000.5"], ["South", "2100", "31500.25"],
        ["East < West", "980", "14700"]]  # fmt: skip
STAFF = [["Name", "Role", "Office"], ["Ada Lovelace", "Engineer", "London"], ["Grace Hopper", "Admiral", "Arlington"]]


def _cells(markdown: str) -> list[list[str]]:
    rows = [line for line in markdown.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]
    return [[cell.strip().replace("\\", "") for cell in row.strip("|").split("|")] for row in rows]


@pytest.mark.parametrize("name", ["slides.pptx", "slides.odp"])
def test_slides_come_back_with_their_titles_as_headings(client: Any, name: str) -> None:
    answer = convert(client, (OFFICE / name).read_bytes(), name)
    markdown = answer["markdown"]
    assert [line for line in markdown.splitlines() if line.startswith("#")] == TITLES
    assert "- Revenue grew in every region" in markdown and "- South sold 2100 units" in markdown
    assert "when a < b and c > d" in rendered_text(markdown)
    assert problems(markdown) == []


@pytest.mark.parametrize("name", ["sheet.xlsx", "sheet.ods"])
def test_sheets_come_back_with_every_cell(client: Any, name: str) -> None:
    answer = convert(client, (OFFICE / name).read_bytes(), name)
    assert answer["pages"][0]["tables"] == 2
    assert _cells(answer["markdown"]) == ROWS + STAFF
    assert problems(answer["markdown"]) == []


@pytest.mark.parametrize("name", ["letter.docx", "letter.odt"])
def test_text_holding_markup_characters_reads_back_as_text(client: Any, name: str) -> None:
    markdown = convert(client, (OFFICE / name).read_bytes(), name)["markdown"]
    assert "Compare with a < b and use the <main> element, never x > 3 *alone*." in rendered_text(markdown)
    assert problems(markdown) == []  # no raw HTML, no emphasis the letter does not have
    assert _cells(markdown) == [["Site", "Count"], ["Harbour", "12"], ["Ridge", "7"]]


@pytest.mark.parametrize("name", ["letter.docx", "letter.odt"])
def test_a_picture_of_a_format_without_pages_has_the_spec_shape(client: Any, name: str) -> None:
    answer = convert(client, (OFFICE / name).read_bytes(), name, return_pictures="on")
    [record] = client.get(f"/v1/documents/{answer['id']}/pictures").json()["data"]
    assert record["width"] == 48 and record["height"] == 32 and isinstance(record["dpi"], int)
    assert record["page_size"] == {"width": 48.0, "height": 32.0}
    assert record["bbox"] == {"l": 0.0, "t": 0.0, "r": 48.0, "b": 32.0, "coord_origin": "TOPLEFT"}


def test_the_office_files_are_small_and_kept_with_their_sources() -> None:
    files = sorted(path.name for path in OFFICE.iterdir())
    for made, source in (("slides", "fodp"), ("sheet", "fods"), ("letter", "fodt")):
        assert f"{made}.{source}" in files
    assert sum(path.stat().st_size for path in OFFICE.iterdir()) < 2 * 1024 * 1024
