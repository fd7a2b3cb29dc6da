"""One page's text lines (native or OCR) and pictures assembled into a DoclingDocument in reading order.

The native PDF pipeline hands out one text item per line in the parser's order; a reader wants paragraphs,
headings and tables, top to bottom. Lines are grouped into rows (same baseline), rows into tables (two or more
rows with the same number of cells) or paragraphs (rows close together at the same size); a row set noticeably
larger than the page's body text is a heading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Line:
    """A text line in top-left page coordinates (points)."""

    text: str
    left: float
    top: float
    right: float
    bottom: float

    @property
    def height(self) -> float:
        """The line's height (about its font size)."""
        return max(self.bottom - self.top, 0.1)


@dataclass
class Figure:
    """A picture on the page: its box (top-left points) and image (an ImageRef or None)."""

    left: float
    top: float
    right: float
    bottom: float
    image: Any = None


@dataclass
class _Block:
    kind: str  # "heading", "paragraph", "table", "picture"
    top: float
    rows: list[list[Line]] = field(default_factory=list)
    figure: Figure | None = None


def _rows(lines: list[Line]) -> list[list[Line]]:
    rows: list[list[Line]] = []
    for line in sorted(lines, key=lambda item: (item.top, item.left)):
        if rows and abs(line.top - rows[-1][0].top) < 0.5 * min(line.height, rows[-1][0].height):
            rows[-1].append(line)
        else:
            rows.append([line])
    return [sorted(row, key=lambda item: item.left) for row in rows]


def _body_height(lines: list[Line]) -> float:
    """The height of the page's body text: the median line height weighted by characters."""
    if not lines:
        return 10.0
    weighted = sorted((line.height, len(line.text)) for line in lines)
    half, seen = sum(chars for _, chars in weighted) / 2, 0
    for height, chars in weighted:
        seen += chars
        if seen >= half:
            return height
    return weighted[-1][0]


def _blocks(lines: list[Line], figures: list[Figure]) -> list[_Block]:
    rows = _rows(lines)
    body = _body_height(lines)
    blocks: list[_Block] = []
    for row in rows:
        height = max(line.height for line in row)
        previous = blocks[-1] if blocks else None
        if len(row) >= 2:
            last = previous.rows[-1] if previous and previous.rows else None
            gap = row[0].top - max(line.bottom for line in last) if last else 0.0
            if previous and previous.kind == "table" and len(last or []) == len(row) and gap < 2.5 * height:
                previous.rows.append(row)
            else:
                blocks.append(_Block("table", row[0].top, [row]))
            continue
        if height >= 1.3 * body:
            blocks.append(_Block("heading", row[0].top, [row]))
            continue
        if previous and previous.kind == "paragraph":
            last = previous.rows[-1]
            gap = row[0].top - max(line.bottom for line in last)
            same_size = abs(height - max(line.height for line in last)) < 0.2 * height
            if gap < 0.9 * height and same_size:
                previous.rows.append(row)
                continue
        blocks.append(_Block("paragraph", row[0].top, [row]))
    for block in blocks:  # a "table" of one row is just a line of text
        if block.kind == "table" and len(block.rows) < 2:
            block.kind = "paragraph"
    blocks.extend(_Block("picture", figure.top, figure=figure) for figure in figures)
    return sorted(blocks, key=lambda block: block.top)


def _prov(page_no: int, box: tuple[float, float, float, float], height: float, chars: int) -> Any:
    from docling_core.types.doc import BoundingBox, CoordOrigin, ProvenanceItem

    left, top, right, bottom = box
    bbox = BoundingBox(l=left, t=height - top, r=right, b=height - bottom, coord_origin=CoordOrigin.BOTTOMLEFT)
    return ProvenanceItem(page_no=page_no, bbox=bbox, charspan=(0, chars))


def _box(lines: list[Line]) -> tuple[float, float, float, float]:
    return (
        min(line.left for line in lines),
        min(line.top for line in lines),
        max(line.right for line in lines),
        max(line.bottom for line in lines),
    )


def page_document(name: str, page_no: int, size: tuple[float, float], lines: list[Line], figures: list[Figure]) -> Any:
    """A DoclingDocument holding this one page: headings, paragraphs, tables and pictures top to bottom."""
    from docling_core.types.doc import DocItemLabel, DoclingDocument, Size, TableCell, TableData

    width, height = size
    doc = DoclingDocument(name=name)
    doc.add_page(page_no=page_no, size=Size(width=width, height=height))
    for block in _blocks(lines, figures):
        if block.kind == "picture" and block.figure is not None:
            figure = block.figure
            box = (figure.left, figure.top, figure.right, figure.bottom)
            doc.add_picture(image=figure.image, prov=_prov(page_no, box, height, 0))
            continue
        cells = [line for row in block.rows for line in row]
        prov_box = _box(cells)
        if block.kind == "table":
            columns = len(block.rows[0])
            table_cells = [
                TableCell(
                    text=line.text,
                    start_row_offset_idx=r,
                    end_row_offset_idx=r + 1,
                    start_col_offset_idx=c,
                    end_col_offset_idx=c + 1,
                    column_header=r == 0,
                )
                for r, row in enumerate(block.rows)
                for c, line in enumerate(row)
            ]
            data = TableData(num_rows=len(block.rows), num_cols=columns, table_cells=table_cells)
            doc.add_table(data=data, prov=_prov(page_no, prov_box, height, 0))
            continue
        text = " ".join(" ".join(line.text for line in row) for row in block.rows).strip()
        if not text:
            continue
        prov = _prov(page_no, prov_box, height, len(text))
        if block.kind == "heading":
            doc.add_heading(text=text, level=1, prov=prov)
        else:
            doc.add_text(label=DocItemLabel.PARAGRAPH, text=text, prov=prov)
    return doc
