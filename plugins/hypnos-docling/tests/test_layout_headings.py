"""Headings as real manuals set them (Debian's dblatex, groff mom and ReportLab manuals), drawn with reportlab:
numbered headings one under the other are headings, not a table of numbers and titles; `Chapter 3` and its title
are one heading; headings alike in length (`Release 0.3.11`, `Release 0.3.12`) are not code; bylines and links are
not headings."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from drawn_pdf import markdown_of
from test_layout_manuals import TEXT, _text


def _headings(markdown: str) -> list[str]:
    return [line.lstrip("#").strip() for line in markdown.splitlines() if line.startswith("#")]


def test_numbered_headings_set_one_under_the_other_are_headings_not_a_table() -> None:
    def draw(canvas: Any) -> None:
        canvas.setFont("Helvetica-Bold", 20)
        canvas.drawString(72, 770, "Chapter 3")
        canvas.drawString(72, 740, "Installing the Package")
        y = _text(canvas, 710) - 14
        for number, title, size in (("3.2", "Installing on Unix like Systems", 14), ("3.2.1", "Dblatex Packages", 12)):
            canvas.setFont("Helvetica-Bold", size)
            canvas.drawString(72, y, number)
            canvas.drawString(120, y, title)
            y -= 20
        _text(canvas, y)

    markdown = markdown_of(draw)
    assert "|" not in markdown
    assert _headings(markdown) == ["Chapter 3 Installing the Package", "3.2 Installing on Unix like Systems",
                                   "3.2.1 Dblatex Packages"]  # fmt: skip


def test_headings_alike_in_length_are_not_code() -> None:
    titles = ["Introduction", "Release 0.3.12", "Release 0.3.11-py3", "Release 0.3.11", "Release 0.3.10"]

    def draw(canvas: Any) -> None:
        y = 770.0
        for number, title in enumerate(titles, 1):  # as dblatex's release notes set them
            canvas.setFont("Helvetica-Bold", 12.9)
            canvas.drawString(72, y, str(number))
            canvas.drawString(92, y, title)
            y = _text(canvas, y - 20, TEXT[:1]) - 14

    markdown = markdown_of(draw)
    assert "```" not in markdown
    assert _headings(markdown) == [f"{number} {title}" for number, title in enumerate(titles, 1)]


def test_bylines_and_links_on_their_own_line_are_not_headings() -> None:
    def draw(canvas: Any) -> None:
        canvas.setFont("Helvetica-Bold", 16)
        canvas.drawString(72, 770, "Producing PDFs with groff and mom")
        canvas.setFont("Helvetica-Oblique", 12)
        canvas.drawString(72, 748, "Deri James and")
        canvas.drawString(72, 734, "Peter Schaffter")
        y = _text(canvas, 700, TEXT * 2) - 14
        canvas.setFont("Helvetica-Bold", 13)
        canvas.drawString(72, y, "1. Learning More")
        y = _text(canvas, y - 18)
        canvas.setFont("Courier", 10)
        canvas.drawString(90, y - 14, "http://docs.python.org/tutorial/")
        _text(canvas, y - 40)

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["Producing PDFs with groff and mom", "1. Learning More"]
    assert "Deri James and Peter Schaffter" in markdown and "http://docs.python.org/tutorial/" in markdown


def test_a_function_definition_set_in_bold_is_not_a_heading() -> None:
    def draw(canvas: Any) -> None:  # texinfo's @deftypefun, as libtasn1's manual sets it
        canvas.setFont("Helvetica-Bold", 13)
        canvas.drawString(72, 770, "4.2 ASN.1 field functions")
        y = _text(canvas, 745, TEXT[:1]) - 20
        canvas.setFont("Helvetica-Bold", 11)
        canvas.drawString(72, y, "asn1 read value")
        y -= 20
        canvas.setFont("Times-Bold", 10)
        canvas.drawString(72, y, "int asn1_read_value (asn1_node root, const char * name,")
        canvas.drawRightString(520, y, "[Function]")
        canvas.drawString(108, y - 12, "void * ivalue, int * len)")
        _text(canvas, y - 34, TEXT)

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["4.2 ASN.1 field functions", "asn1 read value"]


def test_definition_terms_and_index_letters_are_not_headings() -> None:
    def draw(canvas: Any) -> None:  # DocBook's variablelist in the release notes, a two-column index's letters
        canvas.setFont("Helvetica-Bold", 14)
        canvas.drawString(72, 770, "Release 0.1.7")
        y = _text(canvas, 745, TEXT[:1]) - 14
        for term in ("co.linkends.show", "callout.markup.circled"):
            canvas.setFont("Times-Bold", 10)
            canvas.drawString(72, y, term)
            y = _text(canvas, y - 13, TEXT[1:], x=94) - 6
        canvas.setFont("Times-Bold", 12)
        canvas.drawString(72, y - 10, "A")
        canvas.drawString(300, y - 10, "M")
        _text(canvas, y - 28, TEXT)

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["Release 0.1.7"]
    assert "co.linkends.show" in markdown and "callout.markup.circled" in markdown


def test_a_slide_title_repeated_on_its_next_builds_is_one_heading() -> None:
    def draw(canvas: Any) -> None:  # mom's slides (and beamer's pauses): each build a page, the title kept in place
        for build, title in enumerate(["PDF slides", "PDF slides", "PDF slides", "Pauses and transitions"]):
            canvas.setFont("Helvetica-Bold", 20)
            canvas.drawString(72, 770, title)
            _text(canvas, 730, TEXT[: build + 1] if title == "PDF slides" else TEXT)
            canvas.showPage()

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["PDF slides", "Pauses and transitions"]
    assert markdown.count("PDF slides") == 3  # the repeats stay in the text


def test_the_last_term_of_a_definition_list_in_a_list_item_is_not_a_heading() -> None:
    def draw(canvas: Any) -> None:  # DocBook's variablelist inside a bullet item, as dblatex sets release notes
        canvas.setFont("Helvetica-Bold", 14)
        canvas.drawString(72, 770, "Release 0.1.10")
        y = _text(canvas, 745, TEXT[:1]) - 8
        canvas.setFont("Times-Roman", 10)
        canvas.drawString(72, y, "\u2022 the following parameter is added:")
        canvas.setFont("Times-Bold", 10)
        canvas.drawString(80, y - 18, "glossterm.auto.link")
        y = _text(canvas, y - 31, ["Makes glossterms link to their glossary definition."], x=102) - 6
        canvas.setFont("Times-Roman", 10)
        canvas.drawString(72, y, "\u2022 A number of bug fixes.")
        _text(canvas, y - 30, TEXT)

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["Release 0.1.10"]
    assert "glossterm.auto.link" in markdown


def test_a_line_of_text_with_a_logos_raised_letters_is_not_a_heading() -> None:
    def draw(canvas: Any) -> None:  # latex2rtf's manual: `LaTeX2RTF` with its raised A and lowered E ends a line
        canvas.setFont("Helvetica-Bold", 14)
        canvas.drawString(72, 770, "2.1 Options")
        y = _text(canvas, 745, TEXT) - 8
        canvas.setFont("Courier", 10)
        canvas.drawString(72, y, "-b bblfile")
        y -= 14
        line = canvas.beginText(120, y)
        line.setFont("Times-Roman", 10)
        line.textOut("Unless a bblfile is specified with the -b option, L")
        for letter, rise in (("A", 5.0), ("T", 0.0), ("E", -3.5), ("X2RTF uses a", 0.0)):
            line.setRise(rise)
            line.setFont("Times-Roman", 7.5 if rise > 0 else 10)
            line.textOut(letter)
        canvas.drawText(line)
        _text(canvas, y - 13, ["default bibliography file with the same name as the input file, which is made", "by "
                               "running the input file through bibtex."], x=120)  # fmt: skip

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["2.1 Options"]


def test_an_admonitions_label_is_not_a_heading() -> None:
    def draw(canvas: Any) -> None:  # DocBook's note as dblatex sets it: a bold label over the note's smaller text
        canvas.setFont("Helvetica-Bold", 14)
        canvas.drawString(72, 770, "Release 0.1.6")
        y = _text(canvas, 745, TEXT) - 10
        canvas.setFont("Helvetica-Bold", 11)
        canvas.drawString(96, y, "Note")
        canvas.setFont("Helvetica", 9)
        canvas.drawString(
            96, y - 13, "This parameter has no effect if an explicit float style is used for the figures."
        )
        _text(canvas, y - 40, TEXT)

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["Release 0.1.6"]
    assert "Note" in markdown


def test_an_italic_verse_or_cited_title_at_body_size_is_not_a_heading() -> None:
    from hypnos_docling.layout_blocks import blocks_of
    from hypnos_docling.layout_lines import Fonts, Line

    body, italic, bold = "/Times-Roman", "/Times-Italic", "/Times-Bold"  # as groff sets mom's sample chapter
    fonts = Fonts(body=body, body_height=10.8, mono=set(), bold={bold})

    def rows(top: float, lines: list[str], font: str, size: float, left: float = 72) -> list[list[Line]]:
        return [[Line(text, left, top + 16 * n, left + 4.6 * len(text), top + 16 * n + size, font, size)]
                for n, text in enumerate(lines)]  # fmt: skip

    page = rows(80, ["The Bonny Blue Yonder"], bold, 14.2)
    page += rows(110, TEXT, body, 10.8)
    page += rows(170, ["Invidunt ut labore et dolore", "Magna aliquyam erat sed diam", "No sea takimata sanctus est."],
                 italic, 10.9, 147)  # fmt: skip
    page += rows(230, TEXT[:2], body, 10.8)
    page += rows(262, ["Considered Harmful."], italic, 11.4)  # a paper's title cited on a line of its own
    page += rows(278, TEXT[1:], body, 10.8)
    blocks = blocks_of(page, fonts)
    assert [block.text for block in blocks if block.kind == "heading"] == ["The Bonny Blue Yonder"]


def test_a_chapter_label_and_its_title_in_another_face_are_one_heading() -> None:
    def draw(canvas: Any) -> None:  # mom's chapter opening: `Chapter 1` in bold, its title larger in bold italic
        canvas.setFont("Times-Bold", 14)
        canvas.drawCentredString(297, 770, "Chapter 1")
        canvas.setFont("Times-BoldItalic", 17)
        canvas.drawCentredString(297, 748, "The Bonny Blue Yonder")
        _text(canvas, 715, TEXT * 2)

    assert _headings(markdown_of(draw)) == ["Chapter 1 The Bonny Blue Yonder"]


def test_a_row_of_labels_each_build_adds_to_is_one_heading() -> None:
    def draw(canvas: Any) -> None:  # mom's slides: each build of the slide adds a label to the row under its title
        for build in range(1, 4):
            canvas.setFont("Helvetica-Bold", 20)
            canvas.drawString(72, 770, "Macros and preprocessors")
            canvas.setFont("Helvetica-Bold", 14)
            for column, label in enumerate(["tbl", "pic", "eqn"][:build]):
                canvas.drawString(90 + 160 * column, 700, label)
            _text(canvas, 660, TEXT[:build])
            canvas.showPage()

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["Macros and preprocessors"]
    assert "tbl pic eqn" in markdown


def test_a_line_opening_with_an_ellipsis_is_not_a_heading() -> None:
    def draw(canvas: Any) -> None:  # mom's sample documents close each with a bold `...end of sample chapter`
        canvas.setFont("Times-Bold", 14)
        canvas.drawString(72, 770, "2.2. Chapter 5")
        _text(canvas, 745, TEXT * 2)
        canvas.setFont("Times-Bold", 12.5)
        canvas.drawRightString(520, 90, "...end of sample outline")

    markdown = markdown_of(draw)
    assert _headings(markdown) == ["2.2. Chapter 5"]
    assert "end of sample outline" in markdown
