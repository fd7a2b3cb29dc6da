"""Hostile documents are bounded: refused before decoding, or converted within the RSS the README documents.

Each file is generated here and converted in a fresh interpreter whose RSS peak is measured (memory is behaviour
here); the bounds asserted are the ones in the plugin README's table.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from hypnos.errors import HypnosError
from hypnos_docling.bounds import MAX_TEXT_OPERATORS, DocumentBounds

from . import hostile

MiB = 1024 * 1024
BOUNDS = DocumentBounds(max_image_pixels=32 * MiB, max_inflated_bytes=64 * MiB, page_timeout_secs=120)
REFUSED_GROWTH_MIB = 64  # a refused file costs at most this above the loaded libraries


@pytest.mark.parametrize(
    "name",
    ["page_200000pt", "image_12000px", "flate_bomb_600mib", "text_operators_200k", "inline_image_20000px",
     "hex_flate_bomb_600mib"],
)  # fmt: skip
def test_a_hostile_pdf_is_refused_before_it_is_decoded(tmp_path: Path, name: str) -> None:
    make = {
        "page_200000pt": lambda: hostile.giant_page(200_000),
        "image_12000px": lambda: hostile.giant_image(12_000),
        "flate_bomb_600mib": hostile.flate_bomb,
        "text_operators_200k": hostile.text_operators,
        "inline_image_20000px": lambda: hostile.inline_image(20_000),
        "hex_flate_bomb_600mib": lambda: hostile.chained_bomb([b"/ASCIIHexDecode", b"/FlateDecode"], 600 * MiB),
    }[name]
    path = tmp_path / f"{name}.pdf"
    path.write_bytes(make())
    result = hostile.measure(str(path))
    assert result["status"] == 400
    assert result["peak_mib"] - result["baseline_mib"] <= REFUSED_GROWTH_MIB


def test_a_giant_page_is_read_at_a_lower_dpi_within_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "page_14400pt.pdf"
    path.write_bytes(hostile.giant_page(14_400))
    result = hostile.measure(str(path))
    assert result["status"] == 200 and result["pages"] == 1
    assert result["peak_mib"] <= 1600  # README: 1.3 GiB measured at max_image_pixels = 32 Mi


def test_a_dense_page_under_the_operator_cap_converts_within_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "text_operators_19k.pdf"
    path.write_bytes(hostile.text_operators(MAX_TEXT_OPERATORS - 1000))
    result = hostile.measure(str(path))
    assert result["status"] == 200 and result["pages"] == 1
    assert result["peak_mib"] <= 512  # README: 272 MiB measured


def test_the_ocr_scale_drops_to_fit_and_refuses_past_the_readable_floor() -> None:
    assert BOUNDS.ocr_scale(1, 612, 792) == 2.0
    lowered = BOUNDS.ocr_scale(1, 14_400, 14_400)
    assert 0.25 <= lowered < 2.0 and (14_400 * lowered) ** 2 <= 32 * MiB
    with pytest.raises(HypnosError) as refused:
        BOUNDS.ocr_scale(3, 200_000, 200_000)
    assert refused.value.status == 400 and "page 3" in refused.value.message


def refused(kind: str, data: bytes) -> HypnosError:
    with pytest.raises(HypnosError) as caught:
        BOUNDS.check_document(kind, data)
    assert caught.value.status == 400
    return caught.value


def test_an_uploaded_image_is_checked_from_its_header() -> None:
    assert "20000x20000" in refused("image", hostile.png_header(20_000, 20_000)).message
    BOUNDS.check_document("image", hostile.png_header(640, 480))


def test_images_and_parts_inside_a_docx_are_checked_before_decoding() -> None:
    def docx(name: str, data: bytes) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(name, data)
        return out.getvalue()

    picture = docx("word/media/image1.png", hostile.png_header(12_000, 12_000))
    assert "max_image_pixels" in refused("docx", picture).message
    bomb = docx("word/document.xml", b" " * (65 * MiB))
    assert "max_document_inflated_bytes" in refused("docx", bomb).message
    BOUNDS.check_document("docx", docx("word/document.xml", b"<w:document/>"))


def test_a_data_url_image_in_html_is_checked_from_its_header() -> None:
    import base64

    page = b'<html><img src="data:image/png;base64,' + base64.b64encode(hostile.png_header(12_000, 12_000)) + b'">'
    assert "max_image_pixels" in refused("html", page).message


SIDE = 20_000  # 400 M pixels declared: above the 32 Mi bound in every spelling
H3_VARIANTS = {
    "inline_image": lambda: hostile.inline_image(SIDE),
    "inline_image_long_keys": lambda: hostile.inline_image(SIDE, key_w=b"/Width", key_h=b"/Height"),
    "inline_image_escaped_signed": lambda: hostile.inline_image(SIDE, key_w=b"/#57", key_h=b"/H", spell=b"+%d.0"),
    "indirect_size": lambda: hostile.indirect_size_image(SIDE),
    "signed_size": lambda: hostile.signed_size_image(SIDE),
    "escaped_names": lambda: hostile.escaped_names_image(SIDE),
    "jpeg_junk_before_dqt": lambda: hostile.jpeg_xobject_page(SIDE),
    "hex_around_flate_bomb": lambda: hostile.chained_bomb([b"/ASCIIHexDecode", b"/FlateDecode"]),
    "a85_around_flate_bomb": lambda: hostile.chained_bomb([b"/ASCII85Decode", b"/FlateDecode"]),
    "flate_in_flate_bomb": lambda: hostile.chained_bomb([b"/FlateDecode", b"/FlateDecode"]),
    "hex_text_operators": lambda: hostile.encoded_text_operators(MAX_TEXT_OPERATORS + 1000, [b"/ASCIIHexDecode"]),
    "run_length_text_operators": lambda: hostile.encoded_text_operators(
        MAX_TEXT_OPERATORS + 1000, [b"/RunLengthDecode"]
    ),
}


@pytest.mark.parametrize("name", sorted(H3_VARIANTS))
def test_every_spelling_of_a_hostile_pdf_is_refused_from_its_object_model(name: str) -> None:
    data = H3_VARIANTS[name]()
    assert len(data) < 2 * MiB
    message = refused("pdf", data).message
    assert "max_image_pixels" in message or "max_document_inflated_bytes" in message or "text operators" in message


def test_the_same_spellings_within_the_bounds_pass() -> None:
    BOUNDS.check_document("pdf", hostile.inline_image(100, key_w=b"/#57", spell=b"+%d"))
    BOUNDS.check_document("pdf", hostile.indirect_size_image(100))
    BOUNDS.check_document("pdf", hostile.escaped_names_image(100))
    BOUNDS.check_document("pdf", hostile.jpeg_xobject_page(100))
    BOUNDS.check_document("pdf", hostile.chained_bomb([b"/ASCIIHexDecode", b"/FlateDecode"], inflated=2 * MiB))
    BOUNDS.check_document("pdf", hostile.encoded_text_operators(1000, [b"/ASCII85Decode", b"/FlateDecode"]))


def test_a_jpeg_with_junk_before_its_tables_is_checked_from_its_frame_header() -> None:
    assert "20000x20000" in refused("image", hostile.jpeg_junk(SIDE, SIDE)).message
    BOUNDS.check_document("image", hostile.jpeg_junk(640, 480))


def test_an_unreadable_pdf_is_refused_rather_than_unbounded() -> None:
    assert "could not be read" in refused("pdf", b"%PDF-1.7\n" + b"\0" * 100).message


def test_a_pdf_whose_content_stream_loops_on_itself_is_refused_not_a_500() -> None:
    """The fuzz pass's case (an ASCIIHex content stream with an inline image and a broken `endstream`): pypdf's page
    walk gave up with LimitReachedError (a loop through object 5) outside the object scan, a 500 before."""
    broken = (
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n2 0 obj\n<< /Type /Pages /K"
        b"ids [3 0 R] /Count 1 >>\nendobj\n3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 612"
        b"] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>\nendobj\n4 0 obj\n<< /Type /Font "
        b"/Subtype /Type1 /BaseFont /Helvetica >>\nendobj\n5 0 obj\n<< /Filter [/ASCIIHexDecode] /Lengt"
        b"h 161 >>\nstream\n7120312030203020312030203020636d204249202f57696474682038202f48656967687420"
        b"38202f4353202f47202f4250432038202f46202f466c20494420789c6360a00c0000004000012045492051>\ne\x00"
        b"ndstream\nendobj\n6 0 obj\nnull\nendobj\nxref\n0 7\n0000000000 65535 f \n0000000015 00000 n \n00000"
        b"00064 00000 n \n0000000121 00000 n \n0000000247 00000 n \n0000000317 00000 n \n0000000555 0000"
        b"0 n \ntrailer\n<< /Size 7 /Root 1 0 R >>\nstartxref\n575\n%%EOF\n"
    )
    assert "could not be read" in refused("pdf", broken).message


def test_html_nested_past_the_depth_bound_is_refused_before_docling() -> None:
    from hypnos_docling.html_bounds import MAX_HTML_DEPTH

    nested = b"<html><body>" + b"<div>" * 200_000 + b"x" + b"</div>" * 200_000 + b"</body></html>"
    assert len(nested) > MiB
    assert f"more than {MAX_HTML_DEPTH} deep" in refused("html", nested).message
    BOUNDS.check_document("html", b"<html><body>" + b"<div><p>x" * 100 + b"</div>" * 100 + b"</body></html>")
