"""Documents generated for the tests and the bench (PDFs with text, a table, a picture, a scan; DOCX; HTML; never
downloaded), and the client helpers they share."""

from __future__ import annotations

import io
import json
from typing import Any

SCAN_WORDS = "INVOICE NUMBER 4711 TOTAL DUE"
TABLE_ROWS = [("Region", "Revenue"), ("North", "1200"), ("South", "3400")]
BROKEN_SENTENCE = (
    "This closing paragraph is deliberately long so that the page break falls in the middle of it, "
    "and a reader of the markdown should see one paragraph that carries on across the break without "
    "being cut in two by the end of the page, which is exactly what the mending step has to repair "
    "when it joins the pages of the document back together again for the whole answer."
)


def picture_png(width: int = 96, height: int = 64) -> bytes:
    """A small striped RGB PNG (the embedded picture)."""
    from PIL import Image

    image = Image.new("RGB", (width, height), (30, 90, 200))
    for x in range(0, width, 8):
        for y in range(height):
            image.putpixel((x, y), (240, 200, 20))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def report_pdf(pages: int = 3, *, picture: bool = True, table: bool = True) -> bytes:
    """A text PDF: a heading and paragraphs per page, a table and a picture on page 2, a paragraph cut by a break."""
    from fpdf import FPDF

    pdf = FPDF(format="letter")
    pdf.set_auto_page_break(True, margin=20)
    for number in range(1, pages + 1):
        if pdf.page < number:
            pdf.add_page()
        pdf.set_x(pdf.l_margin)
        pdf.set_font("Helvetica", "B", 20)
        pdf.cell(0, 12, f"Chapter {number}: Results", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=11)
        pdf.multi_cell(0, 6, f"Page {number} opens with a short paragraph about quarterly results.")
        if number == 2 and table:
            pdf.ln(4)
            with pdf.table(width=120, col_widths=(60, 60)) as grid:
                for row in TABLE_ROWS:
                    cells = grid.row()
                    for value in row:
                        cells.cell(value)
        if number == 2 and picture:
            pdf.ln(4)
            pdf.image(io.BytesIO(picture_png()), w=60)
        if number == 1 and pages >= 2:  # runs over the bottom margin: the page break cuts it in two
            pdf.set_y(245)
            pdf.multi_cell(0, 6, BROKEN_SENTENCE)
    return bytes(pdf.output())


def long_pdf(pages: int = 20) -> bytes:
    """A plain text PDF of `pages` pages, each with a heading and a few paragraphs (the bench document)."""
    from fpdf import FPDF

    pdf = FPDF(format="letter")
    pdf.set_auto_page_break(False)
    for number in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 18)
        pdf.cell(0, 12, f"Section {number}", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=10)
        for paragraph in range(8):
            pdf.multi_cell(0, 5, f"Paragraph {paragraph} of section {number}. " * 6)
            pdf.ln(2)
    return bytes(pdf.output())


def scanned_pdf(text: str = SCAN_WORDS) -> bytes:
    """One page with no text layer: the text rendered into an image that is the whole page."""
    from fpdf import FPDF
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (1275, 1650), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=64)
    draw.text((120, 200), text, fill=0, font=font)
    raw = io.BytesIO()
    image.save(raw, format="PNG")
    pdf = FPDF(format="letter")
    pdf.add_page()
    pdf.image(io.BytesIO(raw.getvalue()), x=0, y=0, w=pdf.w, h=pdf.h)
    return bytes(pdf.output())


def report_docx() -> bytes:
    """A DOCX with a heading, a paragraph, a bulleted list and a table."""
    import docx

    document = docx.Document()
    document.add_heading("Annual Report", level=1)
    document.add_paragraph("The board met four times this year.")
    document.add_paragraph("First item", style="List Bullet")
    document.add_paragraph("Second item", style="List Bullet")
    grid = document.add_table(rows=len(TABLE_ROWS), cols=2)
    for row, values in zip(grid.rows, TABLE_ROWS, strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def report_html() -> bytes:
    """An HTML page with a heading, a paragraph and a table."""
    rows = "".join(f"<tr><td>{a}</td><td>{b}</td></tr>" for a, b in TABLE_ROWS)
    return (
        "<html><head><title>Report</title></head><body><h1>Web Report</h1>"
        f"<p>Sales grew in every region.</p><table>{rows}</table></body></html>"
    ).encode()


def convert(client: Any, data: bytes, filename: str, model: str = "docling", **fields: str) -> dict[str, Any]:
    """POST the document as a multipart upload; the JSON answer (asserting 200)."""
    response = client.post("/v1/documents/convert", data={"model": model, **fields}, files={"file": (filename, data)})
    assert response.status_code == 200, response.text
    return response.json()


def read_events(response: Any) -> list[Any]:
    """The `data:` payloads of an SSE response, JSON-decoded, with the literal [DONE] kept as a string."""
    events: list[Any] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events
