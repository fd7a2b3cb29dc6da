"""What broke on real manuals (Debian's libtasn1 and shared-mime-info PDFs), reproduced on drawn pages: tight tables,
words glued by docling-parse, running headers a title page lacks, title blocks, listings with blank lines, lists and
paragraphs mixing typewriter words, bold lead-ins."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from drawn_pdf import convert_drawn, markdown_of, write_words
from hypnos_docling.layout_blocks import blocks_of
from hypnos_docling.layout_lines import Fonts, Line, fonts_of
from hypnos_docling.pdf_words import PageText, split_glued

TEXT = [
    "The database is stored below each of the data directories in the order they are listed here.",
    "Information found in a directory is added to the information found in the previous directories.",
    "Applications must be able to extend the database in any way when they are installed or removed.",
]


def _text(canvas: Any, y: float, lines: list[str] = TEXT, x: float = 72) -> float:
    canvas.setFont("Times-Roman", 10)
    for line in lines:
        canvas.drawString(x, y, line)
        y -= 13
    return y


def _headings(markdown: str) -> list[str]:
    return [line.lstrip("#").strip() for line in markdown.splitlines() if line.startswith("#")]


def _table_rows(markdown: str) -> list[list[str]]:
    rows = [line for line in markdown.splitlines() if line.startswith("|") and not re.fullmatch(r"[|\-\s:]+", line)]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_a_table_set_to_fit_its_cells_keeps_its_header_row_and_its_columns() -> None:
    from reportlab.pdfbase.pdfmetrics import stringWidth

    rows = [("Month", "Revenue", "Growth"), ("January", "3.1", "0.2"), ("February", "3.8", "0.5"),
            ("March", "4.2", "0.7"), ("April", "4.9", "1.1")]  # fmt: skip

    def draw(canvas: Any) -> None:
        y = _text(canvas, 740) - 16
        second = 72 + stringWidth("February", "Times-Roman", 10) + 5  # only the cell padding between the columns
        third = second + stringWidth("Revenue", "Times-Bold", 10) + 5
        for number, row in enumerate(rows):
            canvas.setFont("Times-Bold" if number == 0 else "Times-Roman", 10)
            for x, text in zip((72, second, third), row, strict=True):
                canvas.drawString(x, y, text)
            y -= 13
        _text(canvas, y - 20, TEXT[:1])

    markdown = markdown_of(draw)
    assert _table_rows(markdown) == [list(row) for row in rows]
    assert "#" not in markdown


def test_words_set_apart_by_positioning_alone_are_two_words() -> None:
    def draw(canvas: Any) -> None:
        words = "Everyone is keen to see them merged.".split()
        write_words(canvas, 72, 740, words, "Times-Roman", 10, gap=2.5)  # docling-parse reads `themmerged.`

    markdown = markdown_of(draw)
    assert "Everyone is keen to see them merged." in markdown
    assert "themmerged" not in markdown


def test_a_word_docling_parse_glued_across_a_line_break_is_split_by_pdfium_boxes() -> None:
    glued = Line("ENDAnd", 90.0, 430.0, 125.2, 458.4, "CMTT10")
    after = Line("a", 128.9, 448.9, 134.3, 458.4, "CMR10")
    text = "}\r\nEND\r\nAnd a assignments"
    boxes = {3: (90.0, 430.0, 105.7, 440.0), 8: (105.0, 448.9, 125.2, 458.4)}  # END, And (top-left points)
    page = PageText(text, lambda start, end: boxes.get(start))

    parts = split_glued([glued, after], page)

    assert [(part.text, part.top, part.font) for part in parts] == [
        ("END", 430.0, "CMTT10"), ("And", 448.9, "CMR10"), ("a", 448.9, "CMR10"),
    ]  # fmt: skip


def _chapter_page(canvas: Any, header: str | None, number: int, heading: str | None = None) -> None:
    if header:
        canvas.setFont("Times-Italic", 9)
        canvas.drawString(72, canvas._pagesize[1] - 42, header)  # in the page's top band
    y = 700
    if heading:
        canvas.setFont("Helvetica-Bold", 16)
        canvas.drawString(72, y, heading)
        y -= 30
    for _ in range(6):
        y = _text(canvas, y) - 8
    canvas.setFont("Times-Roman", 9)
    canvas.drawString(300, 40, str(number))
    canvas.showPage()


def test_running_headers_a_title_page_or_a_chapter_opening_lacks_are_furniture() -> None:
    def draw(canvas: Any) -> None:
        canvas.setFont("Helvetica-Bold", 24)
        canvas.drawString(72, 700, "Widget Manual")
        _text(canvas, 660)
        canvas.showPage()
        _chapter_page(canvas, None, 1, "1 Introduction")
        _chapter_page(canvas, "Chapter 1: Introduction", 2)
        _chapter_page(canvas, "Chapter 1: Introduction", 3)
        _chapter_page(canvas, None, 4, "2 Structure handling")
        _chapter_page(canvas, "Chapter 2: Structure handling", 5)
        _chapter_page(canvas, "Chapter 2: Structure handling", 6)

    markdown, pages = convert_drawn(draw, json=True)
    assert "Chapter 1" not in markdown and "Chapter 2" not in markdown
    assert _headings(markdown) == ["Widget Manual", "1 Introduction", "2 Structure handling"]
    furniture = [
        [item["text"] for item in page.json["texts"] if item.get("content_layer") == "furniture"] for page in pages
    ]
    assert [page for page, texts in enumerate(furniture, 1) if any(t.startswith("Chapter") for t in texts)] == [
        3, 4, 6, 7,
    ]  # fmt: skip


def _centered(canvas: Any, y: float, text: str, font: str, size: float) -> None:
    canvas.setFont(font, size)
    canvas.drawCentredString(329, y, text)


def test_the_authors_under_a_title_are_not_headings() -> None:
    def draw(canvas: Any) -> None:
        _centered(canvas, 730, "Shared Widget Database", "Helvetica-Bold", 24)
        _centered(canvas, 700, "X Widget Group (http://www.example.org)", "Helvetica-Bold", 17)
        _centered(canvas, 670, "Thomas Example", "Helvetica-Bold", 17)
        _centered(canvas, 650, "tal197 at example.org", "Helvetica-Bold", 12)
        canvas.setFont("Helvetica-Bold", 17)
        canvas.drawString(72, 600, "1. Introduction")
        canvas.setFont("Helvetica-Bold", 14)
        canvas.drawString(120, 570, "1.1. Version")
        _text(canvas, 545, x=120)
        canvas.setFont("Helvetica-Bold", 14)
        canvas.drawString(120, 480, "1.2. What is this spec?")
        _text(canvas, 455, TEXT * 2, x=120)

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["Shared Widget Database", "1. Introduction", "1.1. Version",
                                   "1.2. What is this spec?"]  # fmt: skip
    assert "Thomas Example" in markdown and "tal197 at example.org" in markdown


def test_a_cover_page_keeps_only_its_title_as_a_heading() -> None:
    def draw(canvas: Any) -> None:
        canvas.setFont("Times-Bold", 20)
        canvas.drawString(72, 600, "Widgetlib")
        canvas.setFont("Times-Roman", 10)
        canvas.drawRightString(540, 580, "Abstract Widget Notation One (AWN.1) library for the GNU system")
        canvas.drawRightString(540, 567, "for version 4.19.0, 18 August 2022")
        canvas.setFont("Times-Bold", 12)
        for number, name in enumerate(["Fabio Example", "Simon Example", "Nikos Example (help@example.org)"]):
            canvas.drawString(72, 200 - 15 * number, name)

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["Widgetlib"]
    assert "Nikos Example (help@example.org)" in markdown


def test_a_listing_with_a_blank_line_and_a_lone_brace_is_one_code_block() -> None:
    listing = ["Group ::= SEQUENCE {", "   id      OBJECT IDENTIFIER,", "   value   Value", "}", "", "END"]

    def draw(canvas: Any) -> None:
        y = _text(canvas, 740) - 8
        canvas.setFont("Courier", 10)
        for line in listing:
            if line:
                canvas.drawString(72, y, line)
            y -= 12
        _text(canvas, y - 8, ["And an assignments file as follows, with the values of the structure above."])

    markdown = markdown_of(draw)
    assert markdown.count("```") == 2
    assert markdown.split("```\n")[1].split("\n```")[0].splitlines() == listing


def test_bullets_set_in_a_typewriter_face_are_a_list() -> None:
    def draw(canvas: Any) -> None:
        y = _text(canvas, 740, ["Here is the list of types that the parser can manage:"]) - 6
        canvas.setFont("Courier", 10)
        for name in ["INTEGER;", "ENUMERATED;", "OBJECT IDENTIFIER;", "BIT STRING;"]:
            canvas.drawString(84, y, "\u2022 " + name)
            y -= 12
        _text(canvas, y - 8, ["This version does not handle the REAL type."])

    markdown = markdown_of(draw)
    assert "```" not in markdown
    assert re.findall(r"^- (.*)$", markdown, re.MULTILINE) == [
        "INTEGER;", "ENUMERATED;", "OBJECT IDENTIFIER;", "BIT STRING;",
    ]  # fmt: skip


def test_lines_opening_with_a_typewriter_word_carry_their_paragraph_and_list_item_on() -> None:
    def draw(canvas: Any) -> None:
        y = _text(canvas, 740, TEXT[:1])
        x = write_words(canvas, 72, y, ["update-mime-database"], "Courier", 10, gap=2.5)
        write_words(canvas, x, y, "is passed the mime directory containing the packages subdirectory which".split(),
                    "Times-Roman", 10, gap=2.5)  # fmt: skip
        _text(canvas, y - 13, ["was modified as its only argument. It scans all the XML files in the subdirectory."])
        y -= 40
        canvas.setFont("Times-Roman", 10)
        canvas.drawString(72, y, "\u2022")
        x = write_words(canvas, 84, y, ["glob"], "Courier", 10, gap=2.5)
        write_words(canvas, x, y, "elements have a pattern attribute. Any file whose name matches this pattern".split(),
                    "Times-Roman", 10, gap=2.5)  # fmt: skip
        x = write_words(canvas, 84, y - 13, ["MIME"], "Courier", 10, gap=2.5)
        write_words(canvas, x, y - 13, "type is given this type, subject to conflicting rules in other files.".split(),
                    "Times-Roman", 10, gap=2.5)  # fmt: skip
        canvas.drawString(72, y - 30, "\u2022")
        write_words(canvas, 84, y - 30, "A second item of the list, on one line.".split(), "Times-Roman", 10, gap=2.5)

    markdown = markdown_of(draw)
    assert "```" not in markdown and "#" not in markdown
    assert "subdirectory which was modified as its only argument." in markdown
    assert re.findall(r"^- (.*)$", markdown, re.MULTILINE) == [
        "glob elements have a pattern attribute. Any file whose name matches this pattern MIME type is given this "
        "type, subject to conflicting rules in other files.",
        "A second item of the list, on one line.",
    ]


def test_a_bold_lead_in_does_not_make_a_line_of_body_text_a_heading() -> None:
    body, bold = "/PWNLKT+CMR10", "/LCHKSO+CMB10"  # as libtasn1's manual sets `UTCTime:` (the bold box runs taller)
    fonts = Fonts(body=body, body_height=10.4, mono=set(), bold=set())
    rows = [
        [Line("value=\"1 2 840 10040 4 3\" , len=1 -> OID=dsa-with-sha.", 119, 300, 394, 310.8, body, 10.8)],
        [Line("UTCTime:", 119, 322, 170, 335.4, bold, 13.4),
         Line("VALUE must be a null terminated string in one of these formats:", 181, 325, 522, 335.4, body, 10.4)],
        [Line("string with the seconds and the time zone, as in the examples given below.", 119, 338, 522, 348.4,
              body, 10.4)],
    ]  # fmt: skip
    blocks = blocks_of(rows, fonts)
    assert [block.kind for block in blocks] == ["paragraph", "paragraph"]
    assert blocks[1].text.startswith("UTCTime: VALUE must be")


def test_a_typewriter_face_is_known_by_its_name() -> None:
    lines = [Line(f"body text number {n} of the page", 72, 10.0 * n, 300, 10.0 * n + 9, "/OLMHVN+NimbusRomNo9L-Regu")
             for n in range(8)]  # fmt: skip
    lines.append(Line("0:text/x-diff:__NOGLOBS__", 120, 200, 254, 209, "/JNNPWA+NimbusMonL-Regu"))
    assert fonts_of(lines).mono == {"/JNNPWA+NimbusMonL-Regu"}


def test_numbered_items_parted_by_paragraphs_keep_their_numbers() -> None:
    def draw(canvas: Any) -> None:
        y = 740
        for number, title in [("0.", "PREAMBLE"), ("1.", "APPLICABILITY AND DEFINITIONS"), ("2.", "VERBATIM COPYING")]:
            canvas.setFont("Times-Roman", 10)
            canvas.drawString(72, y, number)
            canvas.drawString(86, y, title + " of the license and what it covers.")
            y = _text(canvas, y - 20, TEXT[:2], x=86) - 12

    markdown = markdown_of(draw)
    assert re.findall(r"^(\d+)\. ([A-Z]+)", markdown, re.MULTILINE) == [
        ("0", "PREAMBLE"), ("1", "APPLICABILITY"), ("2", "VERBATIM"),
    ]  # fmt: skip


def test_an_indented_line_carried_on_in_lower_case_is_not_a_new_item() -> None:
    def draw(canvas: Any) -> None:
        y = _text(canvas, 740) - 8
        y = _text(canvas, y, ["Everyone is permitted to copy and distribute verbatim copies",
                              "of this license document, but changing it is not allowed."], x=100)  # fmt: skip
        _text(canvas, y - 8, TEXT[1:])

    markdown = markdown_of(draw)
    assert re.findall(r"^- (.*)$", markdown, re.MULTILINE) == [
        "Everyone is permitted to copy and distribute verbatim copies of this license document, but changing it is "
        "not allowed."
    ]


def test_a_table_of_contents_title_is_a_heading_not_a_caption() -> None:
    def draw(canvas: Any) -> None:
        canvas.setFont("Times-Bold", 17)
        canvas.drawString(72, 740, "Table of Contents")
        y = 710
        for title, page in [("1 Introduction", 1), ("2 Structure handling", 2), ("2.1 Syntax", 2), ("3 Utilities", 5)]:
            canvas.setFont("Times-Roman", 10)
            canvas.drawString(72, y, title + " " + ". " * (40 - len(title) // 2))
            canvas.drawRightString(450, y, str(page))
            y -= 14

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["Table of Contents"]
    assert len(re.findall(r"^- \d", markdown, re.MULTILINE)) == 4


def test_a_page_waits_for_the_next_only_over_a_row_set_apart_at_its_edge() -> None:
    from hypnos_docling.layout_furniture import FurnitureTracker, bands_of

    text = [Line(f"line {n} of a paragraph that runs to the foot of the page", 72, 60 + 13.0 * n, 520, 69 + 13.0 * n,
                 "Times-Roman") for n in range(55)]  # fmt: skip
    footer = Line("Widget Manual, release 3", 72, 770, 200, 779, "Times-Italic")
    tracker = FurnitureTracker([1, 2, 3])
    running_text = bands_of(text, 792)
    tracker.add(1, running_text)
    assert not tracker.undecided(1, running_text)  # its last line is text: handed out at once
    with_footer = bands_of([*text[:50], footer], 792)
    assert tracker.undecided(1, with_footer)  # a footer standing apart: page 2 tells whether it repeats
