"""One page's text runs (native or OCR) and pictures assembled into a DoclingDocument in reading order.

The native PDF pipeline hands out words in the parser's order; a reader wants headings, paragraphs, lists, code,
tables and captioned pictures, top to bottom and column by column. Words become segments and rows
(layout_lines), rows become blocks (layout_blocks, layout_tables); running headers and page numbers found across
pages (layout_furniture) go to the document's furniture layer, out of the Markdown.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypnos_docling.layout_blocks import CAPTION, Block, blocks_of, code_text, ocr_blocks
from hypnos_docling.layout_grid import Grid, grids_of
from hypnos_docling.layout_lines import Line, column_split, fonts_of, rows_of
from hypnos_docling.layout_repeats import RepeatedHeadings
from hypnos_docling.layout_title import mend_title_block
from hypnos_docling.outline import OutlineGuide
from hypnos_docling.pdf_rules import Rule

__all__ = ["Figure", "Line", "page_document"]


@dataclass
class Figure:
    """A picture on the page: its box (top-left points) and image (an ImageRef or None)."""

    left: float
    top: float
    right: float
    bottom: float
    image: Any = None


def _regions(lines: list[Line], width: float) -> list[list[Line]]:
    """The page's runs in reading order of their regions: full width above, left column, right column, below."""
    gutter = column_split(lines, width)
    if gutter is None:
        return [lines]
    left = [line for line in lines if line.right <= gutter + 2]
    right = [line for line in lines if line.left >= gutter - 2]
    spanning = [line for line in lines if line.right > gutter + 2 and line.left < gutter - 2]
    column_top = min((line.top for line in left + right), default=0.0)
    above = [line for line in spanning if line.top < column_top]
    below = [line for line in spanning if line.top >= column_top]
    return [region for region in (above, left, right, below) if region]


def page_blocks(
    lines: list[Line], figures: list[Figure], width: float, *, ocr: bool = False,
    rules: Callable[[], list[Rule]] | None = None,
) -> list[Block]:  # fmt: skip
    """The page's blocks in reading order, pictures placed by position within their column; `rules` gives the
    page's ruling lines (read only if a row could be a table's)."""
    if ocr:
        blocks = ocr_blocks(rows_of(lines))
        blocks += [Block("picture", figure.top, figure=figure) for figure in figures]
        return sorted(blocks, key=lambda block: block.top)
    fonts = fonts_of(lines)
    grids = _grid_reader(rules) if rules is not None else None
    regions = _regions(lines, width) if lines else []
    ordered: list[Block] = []
    unplaced = list(figures)
    previous_left = 0.0
    for region in regions:
        blocks = blocks_of(rows_of(region), fonts, grids)
        left = min(line.left for line in region)
        right = max(line.right for line in region)
        if ordered and ordered[-1].kind == "code" and blocks and blocks[0].kind == "code":
            _carry_code(ordered[-1], blocks.pop(0), previous_left - left)
        previous_left = left
        mine = (
            [f for f in unplaced if left - 4 <= (f.left + f.right) / 2 <= right + 4] if len(regions) > 1 else unplaced
        )
        unplaced = [f for f in unplaced if f not in mine]
        blocks += [Block("picture", figure.top, figure=figure) for figure in mine]
        ordered += sorted(blocks, key=lambda block: block.top)
    ordered += [Block("picture", figure.top, figure=figure) for figure in unplaced]
    return ordered


def _grid_reader(rules: Callable[[], list[Rule]]) -> Callable[[], list[Grid]]:
    """The page's ruled grids, read from its rules on the first call only."""
    return functools.cache(lambda: grids_of(rules()))


def _carry_code(block: Block, rest: Block, shift: float) -> None:
    """A listing cut by the column break: `rest` (the next column's first block) appended, moved by `shift` so that
    its lines keep their indentation relative to the listing's start."""
    for row in rest.rows:
        moved = [Line(x.text, x.left + shift, x.top, x.right + shift, x.bottom, x.font, x.size) for x in row]
        block.rows.append(moved)
    block.lines.extend(rest.lines)
    block.text = code_text(block.rows)


def link_captions(blocks: list[Block]) -> dict[int, Block]:
    """Each picture's nearest `Figure N` caption (by vertical distance), each caption used once: picture id -> it."""
    captions = [block for block in blocks if block.kind == "caption" and CAPTION.match(block.text)]
    linked: dict[int, Block] = {}
    for picture in (block for block in blocks if block.kind == "picture"):
        figure = picture.figure
        best, best_distance = None, 1e9
        for caption in captions:
            top, bottom = caption.lines[0].top, max(line.bottom for line in caption.lines)
            distance = max(top - figure.bottom, figure.top - bottom, 0.0)  # type: ignore[attr-defined]
            if distance < best_distance and caption.text.lower().startswith("fig"):
                best, best_distance = caption, distance
        if best is not None and best_distance < 80:
            linked[id(picture)] = best
            captions.remove(best)
    return linked


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


def page_document(
    name: str, page_no: int, size: tuple[float, float], lines: list[Line], figures: list[Figure], *,
    furniture: list[Line] | None = None, ocr: bool = False, outline: OutlineGuide | None = None,
    rules: Callable[[], list[Rule]] | None = None, repeats: RepeatedHeadings | None = None,
) -> Any:  # fmt: skip
    """A DoclingDocument holding this one page: its blocks in reading order (its headings checked against the PDF's
    outline when it has one, and against the page before it: `repeats`), its furniture in the furniture layer."""
    from docling_core.types.doc import ContentLayer, DocItemLabel, DoclingDocument, Size

    width, height = size
    doc = DoclingDocument(name=name)
    doc.add_page(page_no=page_no, size=Size(width=width, height=height))
    for line in furniture or []:
        label = DocItemLabel.PAGE_HEADER if line.top < height / 2 else DocItemLabel.PAGE_FOOTER
        prov = _prov(page_no, _box([line]), height, len(line.text))
        doc.add_text(label=label, text=line.text, prov=prov, content_layer=ContentLayer.FURNITURE)
    blocks = page_blocks(lines, figures, width, ocr=ocr, rules=rules)
    if page_no == 1 and not ocr:
        mend_title_block(blocks, width)
    if repeats is not None and not ocr:
        repeats.apply(page_no, blocks)
    if outline and not ocr:
        outline.apply(page_no, blocks)
    captions = link_captions(blocks)
    linked = {id(block) for block in captions.values()}
    group: Any = None
    group_kind: tuple[str, bool] | None = None
    for block in blocks:
        if id(block) in linked:
            continue
        kind = (block.kind, block.enumerated)
        if block.kind in ("list_item", "toc") and kind != group_kind:
            group, group_kind = doc.add_list_group(), kind
        elif block.kind not in ("list_item", "toc"):
            group, group_kind = None, None
        _add_block(doc, block, page_no, height, group, captions.get(id(block)))
    return doc


def _add_block(doc: Any, block: Block, page_no: int, height: float, group: Any, caption: Block | None) -> None:
    from docling_core.types.doc import DocItemLabel, TableCell, TableData

    if block.kind == "picture":
        figure = block.figure
        box = (figure.left, figure.top, figure.right, figure.bottom)  # type: ignore[attr-defined]
        caption_item = None
        if caption is not None:
            prov = _prov(page_no, _box(caption.lines), height, len(caption.text))
            caption_item = doc.add_text(label=DocItemLabel.CAPTION, text=caption.text, prov=prov)
        doc.add_picture(image=figure.image, prov=_prov(page_no, box, height, 0), caption=caption_item)  # type: ignore[attr-defined]
        return
    prov = _prov(page_no, _box(block.lines), height, len(block.text))
    if block.kind == "table":
        cells = [
            TableCell(
                text=text,
                start_row_offset_idx=r,
                end_row_offset_idx=r + 1,
                start_col_offset_idx=c,
                end_col_offset_idx=c + 1,
                column_header=r == 0,
            )
            for r, row in enumerate(block.cells)
            for c, text in enumerate(row)
        ]
        data = TableData(num_rows=len(block.cells), num_cols=len(block.cells[0]), table_cells=cells)
        doc.add_table(data=data, prov=prov)
    elif block.kind == "toc":
        for title, page in block.entries:
            doc.add_list_item(text=f"{title} \u2026 {page}", enumerated=False, parent=group, prov=prov)
    elif block.kind == "list_item":
        doc.add_list_item(text=block.text, enumerated=block.enumerated, marker=block.marker or None, parent=group,
                          prov=prov)  # fmt: skip
    elif block.kind == "code":
        doc.add_code(text=block.text, prov=prov)
    elif block.kind == "heading":
        doc.add_heading(text=block.text, level=block.level, prov=prov)
    elif block.text:
        label = DocItemLabel.CAPTION if block.kind == "caption" else DocItemLabel.PARAGRAPH
        doc.add_text(label=label, text=block.text, prov=prov)
