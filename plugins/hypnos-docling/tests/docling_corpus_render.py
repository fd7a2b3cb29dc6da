"""The corpus truth rendered to PDF: reportlab's platypus (frames, table styles, list flowables, a canvas for running
headers and page numbers) and Chromium's print-to-PDF (CSS columns, @page margin boxes)."""

from __future__ import annotations

import io
from pathlib import Path
from xml.sax.saxutils import escape

from docling_corpus import Code, Figure, Heading, Items, Para, Table, Toc, Truth, run_chromium, truth_html
from hypnos_docling.testing import picture_png


def _styles() -> dict[str, object]:
    from reportlab.lib.styles import ParagraphStyle

    body = ParagraphStyle("body", fontName="Times-Roman", fontSize=10.5, leading=13.5, spaceAfter=6)
    return {
        "body": body,
        1: ParagraphStyle("h1", fontName="Helvetica-Bold", fontSize=17, leading=21, spaceBefore=10, spaceAfter=8),
        2: ParagraphStyle("h2", fontName="Helvetica-Bold", fontSize=13, leading=16, spaceBefore=8, spaceAfter=5),
        3: ParagraphStyle("h3", fontName="Helvetica-Bold", fontSize=10.5, leading=13, spaceBefore=6, spaceAfter=4),
        "cell": ParagraphStyle("cell", fontName="Times-Roman", fontSize=9.5, leading=11.5),
        "head": ParagraphStyle("head", fontName="Times-Bold", fontSize=9.5, leading=11.5),
        "code": ParagraphStyle("code", fontName="Courier", fontSize=9, leading=11, leftIndent=12, spaceAfter=6),
        "caption": ParagraphStyle("caption", fontName="Times-Italic", fontSize=9, leading=11, spaceAfter=8),
        "toc": ParagraphStyle("toc", fontName="Times-Roman", fontSize=10.5, leading=15),
    }


def _flowables(truth: Truth, width: float) -> list[object]:
    from reportlab.lib import colors
    from reportlab.platypus import (
        Image,
        KeepTogether,
        ListFlowable,
        ListItem,
        PageBreak,
        Paragraph,
        Preformatted,
        Spacer,
        TableStyle,
    )
    from reportlab.platypus import Table as Grid

    styles = _styles()
    out: list[object] = []
    for block in truth.blocks:
        if isinstance(block, Heading):
            out.append(Paragraph(escape(block.text), styles[block.level]))
        elif isinstance(block, Para):
            out.append(Paragraph(escape(block.text), styles["body"]))
        elif isinstance(block, Table):
            cells = [
                [Paragraph(escape(cell), styles["head" if r == 0 else "cell"]) for cell in row]
                for r, row in enumerate(block.rows)
            ]
            columns = len(block.rows[0])
            grid = Grid(cells, colWidths=[min(width / columns, 110)] * columns, hAlign="LEFT")
            commands = [("VALIGN", (0, 0), (-1, -1), "TOP")]
            if block.borders:
                commands.append(("GRID", (0, 0), (-1, -1), 0.6, colors.black))
            else:
                commands.append(("LINEBELOW", (0, 0), (-1, 0), 0.6, colors.black))
            grid.setStyle(TableStyle(commands))
            out += [grid, Spacer(1, 8)]
        elif isinstance(block, Items):
            items = [ListItem(Paragraph(escape(item), styles["body"])) for item in block.items]
            kind = (
                {"bulletType": "1", "bulletFormat": "%s."}
                if block.ordered
                else {"bulletType": "bullet", "start": "\u2022"}
            )
            out.append(ListFlowable(items, leftIndent=18, **kind))
        elif isinstance(block, Code):
            out.append(Preformatted("\n".join(block.lines), styles["code"]))
        elif isinstance(block, Figure):
            picture = Image(io.BytesIO(picture_png(block.width, block.height)), block.width, block.height)
            out.append(KeepTogether([picture, Paragraph(escape(block.caption), styles["caption"])]))  # as LaTeX does
        elif isinstance(block, Toc):
            rows = [[Paragraph(escape(title) + " " + ". " * (40 - len(title)), styles["toc"]), str(page)]
                    for title, page in block.entries]  # fmt: skip
            out += [Grid(rows, colWidths=[width - 40, 40], hAlign="LEFT"), PageBreak()]
    return out


def reportlab_pdf(truth: Truth) -> bytes:
    """The truth laid out by reportlab: one or two frames a page, running header and page number on the canvas."""
    from reportlab.lib.pagesizes import letter
    from reportlab.platypus import BaseDocTemplate, Frame, PageTemplate

    page_width, page_height = letter
    margin = 64
    out = io.BytesIO()
    document = BaseDocTemplate(out, pagesize=letter, leftMargin=margin, rightMargin=margin, topMargin=margin,
                               bottomMargin=margin, title=truth.name)  # fmt: skip
    inner = page_width - 2 * margin
    if truth.two_column:
        gap = 20
        column = (inner - gap) / 2
        frames = [Frame(margin + n * (column + gap), margin, column, page_height - 2 * margin, id=f"c{n}")
                  for n in range(2)]  # fmt: skip
    else:
        column = inner
        frames = [Frame(margin, margin, inner, page_height - 2 * margin, id="body")]

    def furniture(canvas: object, doc: object) -> None:
        canvas.saveState()  # type: ignore[attr-defined]
        canvas.setFont("Helvetica", 8.5)  # type: ignore[attr-defined]
        if truth.running_header:
            canvas.drawString(margin, page_height - 40, truth.running_header)  # type: ignore[attr-defined]
        if truth.page_numbers:
            canvas.drawCentredString(page_width / 2, 36, str(doc.page))  # type: ignore[attr-defined]
        canvas.restoreState()  # type: ignore[attr-defined]

    document.addPageTemplates([PageTemplate(id="page", frames=frames, onPage=furniture)])
    document.build(_flowables(truth, column))
    _note_furniture(truth)
    return out.getvalue()


def chromium_pdf(truth: Truth, folder: Path) -> bytes:
    """The truth as HTML printed by headless Chromium; running header and page numbers in @page margin boxes."""
    page = folder / f"{truth.name}.html"
    page.write_text(truth_html(truth), encoding="utf-8")
    out = folder / f"{truth.name}.pdf"
    run_chromium(page, out)
    _note_furniture(truth)
    return out.read_bytes()


def _note_furniture(truth: Truth) -> None:
    truth.furniture = [truth.running_header] if truth.running_header else []
