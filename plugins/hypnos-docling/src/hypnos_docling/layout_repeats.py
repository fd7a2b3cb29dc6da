"""Headings a page repeats from the page before it, in the same place: a slide's title kept on each build of the
slide (mom's and beamer's pauses), a row of labels that each build adds a word to (`tbl`, `tbl pic`), a chapter title
set large as a running header. The first page's heading opens the section; its repeats on the pages right after it
carry it on and are text, not new sections (the furniture pass leaves heading-sized runs in the page's text)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypnos_docling.layout_blocks import Block
from hypnos_docling.outline import title_key

PLACE = 3.0  # points: a heading this close to where the page before set the same title is in the same place
MAX_TITLE = 120  # characters: longer text is no title to repeat

Placed = tuple[str, float, float]  # a heading's key, left and top


def _placed(block: Block) -> Placed:
    return title_key(block.text), min(line.left for line in block.lines), block.lines[0].top


@dataclass
class RepeatedHeadings:
    """The headings and short paragraphs of the last page handed out, where it set them (pages come in order, one
    at a time)."""

    page: int = 0
    headings: list[Placed] = field(default_factory=list)

    def apply(self, page_no: int, blocks: list[Block]) -> None:
        """The page's headings that repeat a line of the previous page in the same place (as it is, or with words
        added after it) become text (in place)."""
        lines = [block for block in blocks if block.kind in ("heading", "paragraph") and block.lines]
        lines = [block for block in lines if len(block.text) <= MAX_TITLE and title_key(block.text)]
        before = self.headings if page_no == self.page + 1 else []
        self.page, self.headings = page_no, [_placed(block) for block in lines]
        for block in (block for block in lines if block.kind == "heading"):
            key, left, top = _placed(block)
            if any(key.startswith(k) and abs(left - x) <= PLACE and abs(top - y) <= PLACE for k, x, y in before):
                block.kind = "paragraph"
