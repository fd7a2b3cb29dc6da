"""Document conversion through the real server: PDF text, headings, tables, mending, OCR, DOCX, HTML, errors."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypnos_docling import testing
from hypnos_docling.testing import convert


def test_pdf_converts_headings_table_and_mends_the_page_break(client: Any) -> None:
    answer = convert(client, testing.report_pdf(), "report.pdf")
    assert answer["object"] == "document"
    assert answer["page_count"] == 3
    assert [page["page"] for page in answer["pages"]] == [1, 2, 3]
    markdown = answer["markdown"]
    assert "## Chapter 1: Results" in markdown and "## Chapter 3: Results" in markdown
    assert "| North" in markdown and "3400" in markdown
    assert testing.BROKEN_SENTENCE in markdown  # one paragraph again across the page break
    assert testing.BROKEN_SENTENCE not in answer["pages"][0]["markdown"]
    assert answer["pages"][1]["tables"] == 1 and answer["pages"][1]["pictures"] == 1
    assert answer["usage"] == {"pages": 3, "pictures": 1, "tables": 1, "pictures_described": 0}
    engine = answer["hypnos_telemetry"]["engine"]
    assert engine["pages"] == 3 and engine["ms_per_page"] > 0


def test_page_range_and_json_output(client: Any) -> None:
    answer = convert(client, testing.report_pdf(), "report.pdf", pages="2-3", output_format="json")
    assert answer["page_count"] == 3
    assert [page["page"] for page in answer["pages"]] == [2, 3]
    assert "Chapter 1" not in answer["markdown"]
    assert answer["pages"][0]["json"]["schema_name"] == "DoclingDocument"
    single = convert(client, testing.report_pdf(), "report.pdf", pages="3")
    assert [page["page"] for page in single["pages"]] == [3]


def test_scanned_page_is_read_with_ocr_and_not_without(client: Any) -> None:
    scan = testing.scanned_pdf()
    answer = convert(client, scan, "scan.pdf")
    assert "INVOICE" in answer["markdown"] and "4711" in answer["markdown"]
    assert answer["usage"]["pictures"] == 0  # the page image is the page, not a picture in it
    plain = convert(client, scan, "scan.pdf", ocr="off")
    assert "INVOICE" not in plain["markdown"]


def test_docx_multipart_and_html_json(client: Any) -> None:
    docx = convert(client, testing.report_docx(), "report.docx")
    assert docx["page_count"] == 1 and [page["page"] for page in docx["pages"]] == [1]
    assert "# Annual Report" in docx["markdown"] and "| North" in docx["markdown"]
    assert "- First item" in docx["markdown"]
    data_url = "data:text/html;base64," + base64.b64encode(testing.report_html()).decode()
    response = client.post("/v1/documents/convert", json={"model": "docling", "file": data_url, "filename": "r.html"})
    assert response.status_code == 200, response.text
    html = response.json()["markdown"]
    assert "# Web Report" in html and "| South" in html
    plain = base64.b64encode(testing.report_html()).decode()
    response = client.post("/v1/documents/convert", json={"model": "docling", "file": plain, "filename": "r.html"})
    assert "Sales grew" in response.json()["markdown"]


@pytest.mark.parametrize(
    ("data", "filename", "fields", "needle"),
    [
        (b"%PDF-1.4\n this is no pdf at all", "broken.pdf", {}, "PDF"),
        (b"\x00\x01\x02 random bytes", "blob.bin", {}, "Unsupported document format"),
        (b"x" * (1024 * 1024 + 10), "big.md", {}, "max_document_bytes"),
        (testing.report_pdf(), "r.pdf", {"ocr": "maybe"}, "`ocr`"),
        (testing.report_pdf(), "r.pdf", {"pages": "5-2"}, "`pages`"),
        (testing.report_pdf(), "r.pdf", {"pages": "9"}, "`pages`"),
        (testing.report_pdf(), "r.pdf", {"output_format": "yaml"}, "output_format"),
    ],
)
def test_bad_documents_get_400(client: Any, data: bytes, filename: str, fields: dict[str, str], needle: str) -> None:
    response = client.post(
        "/v1/documents/convert", data={"model": "docling", **fields}, files={"file": (filename, data)}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and needle in error["message"]


def test_page_count_is_bounded_before_converting(client: Any) -> None:
    response = client.post(
        "/v1/documents/convert",
        data={"model": "docling-small"},
        files={"file": ("long.pdf", testing.long_pdf(6))},
    )
    assert response.status_code == 400
    assert "max_pages" in response.json()["error"]["message"]


def test_remote_urls_follow_the_checked_address_rules(client: Any, base_url: str) -> None:
    response = client.post("/v1/documents/convert", json={"model": "docling", "url": f"{base_url}/health"})
    assert response.status_code == 400
    assert "non-public" in response.json()["error"]["message"]


def test_auth_applies(base_url: str) -> None:
    import httpx

    response = httpx.post(f"{base_url}/v1/documents/convert", data={"model": "docling"}, files={"file": ("a.md", b"x")})
    assert response.status_code == 401
    assert httpx.get(f"{base_url}/v1/documents/doc-x/pictures").status_code == 401


def test_unknown_model_and_wrong_modality(client: Any) -> None:
    response = client.post("/v1/documents/convert", data={"model": "nope"}, files={"file": ("a.md", b"# x")})
    assert response.status_code == 404
    response = client.post("/v1/documents/convert", data={"model": "eyes"}, files={"file": ("a.md", b"# x")})
    assert response.status_code == 400


def test_a_model_with_layout_artifacts_answers_503_naming_what_is_missing(client: Any) -> None:
    response = client.post("/v1/documents/convert", data={"model": "docling-layout"}, files={"file": ("a.md", b"# x")})
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["type"] == "model_not_available"
    assert "standard layout pipeline" in error["message"] and "torch" in error["message"]


def test_the_standard_pipeline_without_docling_models_answers_503_naming_them(client: Any) -> None:
    response = client.post("/v1/documents/convert", data={"model": "docling-standard"},
                           files={"file": ("r.pdf", testing.report_pdf(1))})  # fmt: skip
    assert response.status_code == 503
    message = response.json()["error"]["message"]
    assert "docling-ibm-models" in message and "torchvision" in message and 'pipeline = "layout"' in message


def test_pipeline_layout_serves_the_layout_pass_beside_docling_artifacts(client: Any) -> None:
    response = client.post("/v1/documents/convert", data={"model": "docling-own-layout"},
                           files={"file": ("r.pdf", testing.report_pdf(1))})  # fmt: skip
    assert response.status_code == 200
    assert "## Chapter 1: Results" in response.json()["markdown"]
