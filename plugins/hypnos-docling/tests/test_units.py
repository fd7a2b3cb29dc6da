"""Markdown mending across page breaks and the picture store's TTL and size cap, without a server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypnos.errors import HypnosError
from hypnos_docling.events import Picture
from hypnos_docling.markdown import join_pages
from hypnos_docling.pictures import PictureStore

sys.path.insert(0, str(Path(__file__).parent))

from markdown_check import rendered_text


def test_a_paragraph_cut_by_a_page_break_is_one_paragraph() -> None:
    joined = join_pages(["# Title\n\nThe results were better than", "expected in every region.\n\nNext."])
    assert joined == "# Title\n\nThe results were better than expected in every region.\n\nNext.\n"


def test_a_hyphenated_word_is_joined() -> None:
    assert join_pages(["It was a remark-", "able year."]) == "It was a remarkable year.\n"


def test_finished_sentences_and_headings_stay_apart() -> None:
    assert join_pages(["Done.", "## Next"]) == "Done.\n\n## Next\n"
    assert join_pages(["Done.", "Another paragraph."]) == "Done.\n\nAnother paragraph.\n"


def test_a_table_cut_by_a_page_break_is_one_table() -> None:
    first = "| Region | Revenue |\n|---|---|\n| North | 1200 |"
    second = "| South | 3400 |\n|---|---|\n| East | 10 |"
    assert (
        join_pages([first, second])
        == "| Region | Revenue |\n|---|---|\n| North | 1200 |\n| South | 3400 |\n| East | 10 |\n"
    )


def test_a_list_cut_by_a_page_break_is_one_list() -> None:
    assert join_pages(["Items:\n\n- one\n- two", "- three"]) == "Items:\n\n- one\n- two\n- three\n"


def _picture(size: int) -> Picture:
    return Picture(page=1, png=b"x" * size)


def test_store_drops_the_oldest_documents_above_its_cap() -> None:
    store = PictureStore(ttl_secs=60, max_bytes=250)
    first, second, third = store.open(), store.open(), store.open()
    store.add(first, [_picture(100)])
    store.add(second, [_picture(100)])
    store.add(third, [_picture(100)])
    with pytest.raises(HypnosError) as gone:
        store.get(first.id)
    assert gone.value.status == 404
    assert store.picture(second.id, 1).png == b"x" * 100
    assert store.picture(third.id, 1).png == b"x" * 100


def test_store_expires_documents_after_the_ttl() -> None:
    now = [1000.0]
    store = PictureStore(ttl_secs=10, clock=lambda: now[0])
    document = store.open()
    assert store.add(document, [_picture(5), _picture(5)]) == [1, 2]
    assert store.picture(document.id, 2).png == b"xxxxx"
    now[0] += 10
    with pytest.raises(HypnosError):
        store.get(document.id)


def test_the_picture_store_answers_404_to_another_owner() -> None:
    store = PictureStore(ttl_secs=60)
    document = store.open(owner="alice")
    store.add(document, [Picture(page=1, png=b"\x89PNG")])
    assert store.picture(document.id, 1, owner="alice").png == b"\x89PNG"
    for owner in ("bob", None):
        with pytest.raises(HypnosError) as refused:
            store.get(document.id, owner)
        assert refused.value.status == 404
        with pytest.raises(HypnosError):
            store.delete(document.id, owner)
    assert store.get(document.id, "alice").id == document.id


SITE_PAGE = (
    "<html><head><title>Guide</title></head><body><nav><a href='/'>Home</a> <a href='/docs'>All docs</a></nav>"
    "<header><p>Example Site banner</p></header><main><h1>Install guide<a class='headerlink' href='#i'>\u00b6</a></h1>"
    "<p>Run the installer &amp; wait for a &lt;done&gt; line.</p><h2>Upgrade<a href='#u'>\u00b6</a></h2><p>Same.</p>"
    "</main><footer>Copyright Example Site</footer></body></html>"
).encode()


def test_html_keeps_the_main_content_without_navigation_or_pilcrows() -> None:
    from hypnos.engine import CancelToken, DocumentInput
    from hypnos_docling.bounds import DocumentBounds
    from hypnos_docling.convert import Converter
    from hypnos_docling.events import PageDone

    pages: list[PageDone] = []
    job = DocumentInput(data=SITE_PAGE, filename="guide.html")
    Converter(threads=1, max_pages=10, bounds=DocumentBounds.defaults()).convert(
        job, CancelToken(), lambda e: pages.append(e) if isinstance(e, PageDone) else None
    )
    markdown = pages[0].markdown
    assert "# Install guide" in markdown and "## Upgrade" in markdown
    assert "\u00b6" not in markdown
    assert "Home" not in markdown and "banner" not in markdown and "Copyright" not in markdown
    assert "Run the installer & wait for a <done> line." in rendered_text(markdown)  # escaped, read back as text


def test_the_standard_pipelines_pictures_are_encoded_once_and_handed_to_their_pages() -> None:
    from types import SimpleNamespace

    from hypnos_docling.standard import pictures_by_page

    on = [SimpleNamespace(prov=[SimpleNamespace(page_no=page)]) for page in (2, 5, 2)] + [SimpleNamespace(prov=[])]
    doc = SimpleNamespace(pictures=on)
    encoded: list[int] = []

    def pictures_of(document: object, page_no: int) -> list[Picture]:
        encoded.append(page_no)
        return [Picture(page=page_no, png=bytes([i]), width=1, height=1) for i in range(len(on))]

    by_page = pictures_by_page(doc, pictures_of)
    assert len(encoded) == 1  # the whole document's pictures once, not once a page
    assert {page: [p.png for p in pictures] for page, pictures in by_page.items()} == {
        2: [b"\x00", b"\x02"],
        5: [b"\x01"],
    }
    assert all(p.page == page for page, pictures in by_page.items() for p in pictures)


def test_a_blank_page_is_not_sent_to_ocr_and_a_scan_is() -> None:
    from fpdf import FPDF
    from hypnos.engine import CancelToken, DocumentInput
    from hypnos_docling import testing
    from hypnos_docling.bounds import DocumentBounds
    from hypnos_docling.convert import Converter

    blank = FPDF(format="letter")
    blank.add_page()
    read: list[int] = []

    class Counting(Converter):
        def ocr_lines(self, image: object, scale: float) -> list[object]:  # type: ignore[override]
            read.append(1)
            return super().ocr_lines(image, scale)  # type: ignore[return-value]

    converter = Counting(threads=1, max_pages=10, bounds=DocumentBounds.defaults())
    for data, expected in ((bytes(blank.output()), 0), (testing.scanned_pdf(), 1)):
        read.clear()
        converter.convert(DocumentInput(data=data, filename="p.pdf"), CancelToken(), lambda event: None)
        assert len(read) == expected


def test_the_engine_host_uses_its_cores_when_threads_is_unset() -> None:
    import os

    from hypnos_docling.engine import host_cores
    from hypnos_docling.options import DoclingOptions

    assert DoclingOptions().threads is None
    assert host_cores() == len(os.sched_getaffinity(0))
