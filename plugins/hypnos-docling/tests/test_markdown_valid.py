"""Markdown that never breaks, as a property: any text reads back as itself, any pages join without a fence or a
heading lost, and any document drawn from headings, paragraphs, lists, listings with blank lines and tables converts
to Markdown that parses (CommonMark) with the same blocks page by page as whole."""

from __future__ import annotations

import sys
from pathlib import Path

from hypnos_docling.markdown import join_pages
from hypnos_docling.md_text import escape_block, escape_heading, escape_inline, tidy_blocks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

from docling_corpus import WORDS, Code, Heading, Items, Para, Table, Truth
from markdown_check import blocks, join_problems, problems, rendered_text

MARKUP = "ab1 .#-+*_`<>&;[]():!|\\~=\t"
PIECES = [*MARKUP, "&amp;", "<div>", "](x)", "1. ", "```", "---", "\n"]
texts = st.lists(st.sampled_from(PIECES), max_size=24).map("".join)


@given(texts)
def test_any_paragraph_text_reads_back_as_itself(text: str) -> None:
    markdown = escape_block(text)
    assert rendered_text(markdown) == " ".join(text.split())
    assert problems(markdown) == []
    assert {kind for kind, _ in blocks(markdown)} <= {"paragraph"}


@given(texts.filter(lambda text: "\n" not in text))
def test_any_heading_or_cell_text_reads_back_as_itself(text: str) -> None:
    heading = "## " + escape_heading(text)
    assert rendered_text(heading) == " ".join(text.split())
    cell = escape_inline(text).replace("|", "\\|")
    table = f"| a | b |\n|---|---|\n| {cell} | x |"
    assert [kind for kind, _ in blocks(table)] == ["table"]
    assert rendered_text(table) == " ".join(f"a b {text} x".split())


words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)
listing = st.lists(st.one_of(words, st.just(""), words.map(lambda w: "    " + w)), min_size=2, max_size=8).map(
    lambda lines: "```\n" + "\n".join(lines).strip("\n") + "\n```"
)
page_block = st.one_of(
    words.map(lambda w: "## " + w.title()),
    words,  # a paragraph without a sentence end: mended with the next page's first paragraph
    st.builds(lambda w: w.capitalize() + ".", words),
    listing,
    st.lists(words, min_size=1, max_size=3).map(lambda items: "\n".join("- " + item for item in items)),
    st.just("| a | b |\n|---|---|\n| 1 | 2 |"),
    st.just("16"),  # a page number left at a page's top
)
pages = st.lists(st.lists(page_block, min_size=1, max_size=5).map("\n\n".join), min_size=1, max_size=4)


@given(pages)
def test_any_pages_join_with_their_headings_and_listings_whole(markdowns: list[str]) -> None:
    tidied = [tidy_blocks(page) for page in markdowns]
    assert join_problems(tidied, join_pages(tidied)) == []


def test_a_listing_with_a_blank_line_ending_a_page_keeps_the_next_page_out_of_its_fence() -> None:
    pages = ["## Usage\n\n```\nint x;\n\nreturn 0;\n```", "16\n\n## Next section\n\nText."]
    joined = join_pages(pages)
    assert "```\n\n16" in joined and "## Next section" in joined
    assert join_problems(pages, joined) == []


def test_a_highlighted_html_listing_is_one_fence() -> None:
    from test_layout_corpus import convert_in_process

    page = b"<html><body><h1>zlib</h1><pre><b>int</b> deflate(z_streamp strm, <i>int</i> flush);\n  return 0;</pre>"
    markdown, _, _ = convert_in_process(page + b"<p>Next.</p></body></html>", "zlib.html")
    assert "```\nint deflate(z_streamp strm, int flush);\n  return 0;\n```" in markdown
    assert problems(markdown) == []


sections = st.lists(
    st.one_of(
        st.builds(lambda w: Heading(2, w.title()), words),
        st.builds(lambda w: Para((w + " ") * 6 + "end."), words),
        st.builds(lambda ws: Items([w.capitalize() for w in ws], False), st.lists(words, min_size=2, max_size=4)),
        st.builds(lambda ws: Items([w.capitalize() for w in ws], True), st.lists(words, min_size=2, max_size=4)),
        st.builds(
            lambda ls: Code(["def f(x):", *("    " + line for line in ls), "", "return x"]),
            st.lists(words, min_size=1, max_size=4),
        ),
        st.builds(
            lambda ws: Table([["Name", "Value"], *([w, str(n)] for n, w in enumerate(ws))], True),
            st.lists(words, min_size=2, max_size=4),
        ),
        st.just(Para("Compare a < b && c > d in the <a> element, *alone* at 5 % of [the](cost).")),
    ),
    min_size=4,
    max_size=40,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections)
def test_any_drawn_document_converts_to_markdown_that_parses_page_by_page_as_whole(body: list[object]) -> None:
    from docling_corpus_render import reportlab_pdf
    from test_layout_corpus import convert_in_process

    truth = Truth(name="drawn", renderer="reportlab", blocks=[Heading(1, "Drawn Document"), *body])  # type: ignore[list-item]
    markdown, done, _ = convert_in_process(reportlab_pdf(truth), "drawn.pdf")
    for page in done:
        assert problems(page.markdown) == [], page.markdown
    assert join_problems([page.markdown for page in done], markdown) == []
