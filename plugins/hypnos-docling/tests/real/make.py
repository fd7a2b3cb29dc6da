"""Rebuilds the real-document corpus from Debian's packages: a few pages of each manual, cut with pypdfium2, and the
headings on those pages as the manual's own outline (bookmarks) lists them.

Run from this folder with the plugin's venv (pypdfium2): `python make.py` (apt-get download + dpkg -x into a
scratch folder; the packages and versions are named below). Writes NAME.pdf and truth.json.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
# name: (Debian package, path in the package, producer, the pages kept, 1-based; the contents pages among them)
SOURCES = {
    "pdfmark": ("groff=1.22.4-10", "usr/share/doc/groff-base/pdf/pdfmark.pdf.gz", "groff ms, Ghostscript",
                [1, 2, 3, 4, 5], [2]),
    "mom-pdf": ("groff=1.22.4-10", "usr/share/doc/groff-base/examples/mom/mom-pdf.pdf.gz", "groff mom, gropdf",
                [1, 2, 3, 4], [2]),
    "dblatex-notes": ("dblatex-doc=0.3.12py3-2", "usr/share/doc/dblatex/release-notes.pdf.gz", "DocBook, dblatex",
                      [3, 4, 5], [3]),
    "dblatex-manual": ("dblatex-doc=0.3.12py3-2", "usr/share/doc/dblatex/manual.pdf.gz", "DocBook, dblatex",
                       [2, 3, 4, 5, 21, 22], [4, 5]),
    "reportlab-guide": ("python-reportlab-doc=3.6.12-1+deb12u1",
                        "usr/share/doc/python-reportlab-doc/reportlab-userguide.pdf", "ReportLab",
                        [2, 3, 9, 11], [2, 3]),
    "latex2rtf": ("latex2rtf-doc=2.3.18a-3", "usr/share/doc/latex2rtf-doc/latex2rtf.pdf.gz", "texinfo, pdfTeX",
                  [2, 4, 5], []),
}  # fmt: skip


def _clean(title: str) -> str | None:
    """An outline title as printed, or None when the outline holds markup instead (`F[C]`, `L@kern`)."""
    if "@" in title or title.startswith(("Title Page:", "Cover:")):
        return None
    return re.sub(r"F\[[^\]]*\]", "", title).strip()  # groff's font switches


def main() -> None:
    import pypdfium2

    truth = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for name, (package, path, producer, pages, contents) in SOURCES.items():
            unpacked = folder / package.split("=")[0]
            if not unpacked.exists():
                subprocess.run(["apt-get", "download", package], cwd=folder, check=True)
                deb = next(folder.glob(package.split("=")[0] + "_*.deb"))
                subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
            raw = (unpacked / path).read_bytes()
            source = pypdfium2.PdfDocument(gzip.decompress(raw) if path.endswith(".gz") else raw)
            headings = []
            for mark in source.get_toc(max_depth=8):
                dest = mark.get_dest()
                title = _clean(mark.get_title())
                if dest is not None and title and dest.get_index() + 1 in pages:
                    headings.append([pages.index(dest.get_index() + 1) + 1, mark.level, title])
            cut = pypdfium2.PdfDocument.new()
            cut.import_pages(source, [page - 1 for page in pages])
            cut.save(HERE / f"{name}.pdf")
            kept = [pages.index(page) + 1 for page in contents]
            truth[name] = {"package": package, "file": "/" + path, "producer": producer, "pages": pages,
                           "contents_pages": kept, "headings": headings}  # fmt: skip
    (HERE / "truth.json").write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
