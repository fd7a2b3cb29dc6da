"""Real manuals from Debian's packages (tests/real: pages cut by make.py, six producers: groff ms and mom, dblatex,
ReportLab, texinfo) scored against their own outlines and the tables transcribed from their pages: heading precision
and recall, table cells exact, contents pages read as tables, Markdown that breaks. `python
tests/test_layout_real.py [--unseen | FILE.pdf ...]` prints the table, and with `--unseen` the same of the ten whole
PDFs the tests do not see (tests/real/unseen.py fetches them; their outlines and a few transcribed tables as truth),
converted as published and without their outlines."""

from __future__ import annotations

import io
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from docling_corpus import Table
from docling_scorer import _score_tables, parse_markdown
from markdown_check import join_problems
from test_layout_corpus import convert_in_process

REAL = Path(__file__).parent / "real"
# headings printed on the kept pages that the manual's outline leaves out (transcribed from the rendered pages)
PRINTED = {
    "pdfmark": [[1, "Portable Document Format Publishing with GNU Troff"]],
    "mom-pdf": [[1, "Producing PDFs with groff and mom"]],
    "dblatex-notes": [[1, "Contents"]],
    "dblatex-manual": [[1, "REVISION HISTORY"], [2, "REVISION HISTORY"], [3, "Contents"], [1, "COLLABORATORS"]],
    "reportlab-guide": [[3, "Other modifications"]],
    "latex2rtf": [[3, "2.2 Obtaining LaTeX2RTF"]],  # its outline title is TeX markup
}


_GUILLON = "B. Guillon"
# the tables printed on the kept pages, cell by cell (transcribed from the rendered pages); (page, rows)
TABLES: dict[str, list[tuple[int, list[list[str]]]]] = {
    "dblatex-manual": [
        (1, [["TITLE :", "REFERENCE :"], ["DocBook to LaTeX Publishing", "Ref A1"]]),
        (1, [["ACTION", "NAME", "DATE", "SIGNATURE"], ["WRITTEN BY", "Beno\u00eet Guillon", "7 November 2020", ""],
             ["REVIEWED BY", "Andreas Hoenen", "7 November 2020", ""]]),
        (1, [["NUMBER", "DATE", "DESCRIPTION", "NAME"],
             ["01", "2009/05/05", "The manual does not include the change history anymore. The change history is now "
              "in the release note. The XSL Parameters are now described as reference entries.", _GUILLON],
             ["02", "2009/06/21", "Add a section about the new set support, and a section about how to extend the "
              "verbatim rendering.", _GUILLON],
             ["03", "2011/07/03", "Add a section about the new HTML table support, and a section about the PyPI "
              "distribution.", _GUILLON],
             ["04", "2012/04/10", "Update documentation for release 0.3.3.", _GUILLON],
             ["05", "2012/06/03", "Update documentation for release 0.3.4.", _GUILLON],
             ["06", "2014/05/26", "Update documentation for release 0.3.5.", _GUILLON],
             ["07", "2015/05/15", "Update documentation for release 0.3.6: add the ability to use a texpost python "
              "plugin, and new index capabilities.", _GUILLON],
             ["08", "2015/08/06", "Update documentation for release 0.3.7: add section Section 4.6.", _GUILLON]]),
        (2, [["NUMBER", "DATE", "DESCRIPTION", "NAME"],
             ["09", "2016/07/20", "Update documentation for release 0.3.8: add appendix Appendix B, and sections "
              "Section 5.7.1, Section 4.11.", "B. Guillon / Karl O. Pinc"],
             ["10", "2016/07/24", "Update documentation for release 0.3.9: add new features in Section 5.7.1 and "
              "complete some sections.", "B. Guillon / Karl O. Pinc"],
             ["11", "2017/04/03", "Update documentation for release 0.3.10: add the features of Section 4.5, and put "
              "some cosmetic changes in Section 5.7.", _GUILLON],
             ["12", "2019/09/10", "Update release note for version 0.3.11 that is a bugfix release.", _GUILLON],
             ["13", "2020/01/10", "Update release note for version 0.3.11-py3: dblatex fork for python3.", _GUILLON],
             ["14", "2020/11/07", "Update release note for version 0.3.12 that is a bugfix release.",
              "B. Guillon / P. Reinholdtsen"]]),
    ],
}  # fmt: skip


def key(text: str) -> str:
    """Letters and digits only, case folded (`2.1. The pdfmark Operator` and `2.1 The pdfmark Operator` agree)."""
    return re.sub(r"[^0-9a-z]", "", re.sub(r"\\(.)", r"\1", text).casefold())


def _same(found: str, true: str) -> bool:
    return found == true or (min(len(found), len(true)) >= 4 and (found.endswith(true) or true.endswith(found)))


def score(
    markdown: str, pages: list[Any], headings: list[tuple[int, str]], contents: list[int],
    tables: list[tuple[int, list[list[str]]]] | None = None,
) -> Counter[str]:  # fmt: skip
    """Counts: headings found, true and matched (page by page), table cells right, tables on contents pages, broken
    outputs."""
    counts: Counter[str] = Counter()
    for number in sorted({number for number, _ in tables or []}):  # a found table counts for one true table
        found = parse_markdown(next(page.markdown for page in pages if page.page == number)).tables
        truth = [Table(rows=rows, borders=True) for page, rows in tables or [] if page == number]
        _score_tables(truth, found, counts)
    for page in pages:
        found = [key(text) for _, text in parse_markdown(page.markdown).headings]  # not a `# comment` in a fence
        true = [key(text) for number, text in headings if number == page.page]
        counts["found"] += len(found)
        counts["true"] += len(true)
        for text in found:
            match = next((candidate for candidate in true if _same(text, candidate)), None)
            if match is not None:
                true.remove(match)
                counts["right"] += 1
        if page.page in contents:
            counts["contents_tables"] += page.tables
    counts["broken"] += bool(join_problems([page.markdown for page in pages], markdown))
    return counts


def figures(counts: Counter[str]) -> dict[str, float]:
    """The table's figures from summed counts."""
    return {
        "heading precision": counts["right"] / counts["found"] if counts["found"] else 1.0,
        "heading recall": counts["right"] / counts["true"] if counts["true"] else 1.0,
        "table cells exact": counts["cell_right"] / counts["cell_true"] if counts["cell_true"] else 1.0,
        "contents pages as tables": float(counts["contents_tables"]),
        "broken markdown": float(counts["broken"]),
    }


def score_real() -> dict[str, dict[str, float]]:
    """Each kept manual's figures and the whole corpus's."""
    truth = json.loads((REAL / "truth.json").read_text(encoding="utf-8"))
    rows: dict[str, dict[str, float]] = {}
    total: Counter[str] = Counter()
    for name, entry in truth.items():
        headings = [(page, title) for page, _level, title in entry["headings"]] + [tuple(x) for x in PRINTED[name]]
        markdown, pages, _ = convert_in_process((REAL / f"{name}.pdf").read_bytes(), f"{name}.pdf")
        counts = score(markdown, pages, headings, entry["contents_pages"], TABLES.get(name))  # type: ignore[arg-type]
        rows[name] = figures(counts)
        total.update(counts)
    rows["all"] = figures(total)
    return rows


def printed_title(title: str) -> str:
    """An outline title as the page prints it: groff's font switches (`The F[C]pdfmarkF[] Operator`) and texinfo's
    TeX markup for the LaTeX logo (`L@kern -.36em@raise .3ex@hbox {a}@kern -.15emTeX2RTF{}`) taken out, groff's
    `Title Page:` label on a cover's entry left off."""
    title = re.sub(r"F\[[^\]]*\]", "", title)
    title = re.sub(r"@(?:kern|raise|lower)\s*-?[\d.]+\s*(?:em|ex|pt)", "", title)
    title = re.sub(r"@hbox\s*\{([^}]*)\}", r"\1", title).replace("{}", "")
    return re.sub(r"^(?:Title Page|Cover):\s*", "", title).strip()


def without_outline(data: bytes) -> bytes:
    """The PDF's pages copied into a new PDF, which leaves its outline behind (as make.py cuts the corpus)."""
    import pypdfium2

    source, copy = pypdfium2.PdfDocument(data), pypdfium2.PdfDocument.new()
    copy.import_pages(source)
    out = io.BytesIO()
    copy.save(out)
    return out.getvalue()


def score_outlined(
    path: Path, tables: list[tuple[int, list[list[str]]]] | None = None, *, withheld: bool = False,
    printed: list[tuple[int, str]] | None = None,
) -> Counter[str]:  # fmt: skip
    """A PDF outside the corpus scored against its own outline (its headings, its contents pages), the headings
    `printed` that it leaves out, and the tables transcribed from its pages, if any; `withheld`: converted without
    its outline (the typography alone)."""
    import pypdfium2

    data = path.read_bytes()
    document = pypdfium2.PdfDocument(data)
    headings = [(mark.get_dest().get_index() + 1, printed_title(mark.get_title()))
                for mark in document.get_toc(max_depth=8) if mark.get_dest() is not None]  # fmt: skip
    contents = [page for page, title in headings if re.fullmatch(r"(?i)(table of )?contents", title.strip())]
    headings += printed or []
    markdown, pages, _ = convert_in_process(without_outline(data) if withheld else data, path.name)
    counts = score(markdown, pages, headings, contents, tables)
    if not headings:  # no outline, no truth: its headings are neither right nor false
        for name in ("found", "true", "right"):
            counts.pop(name, None)
    return counts


def score_unseen(paths: list[Path], *, withheld: bool = False, printed: bool = False) -> dict[str, dict[str, float]]:
    """Each PDF's figures against its outline (and the tables of tests/real/unseen.py; `printed`: and the headings
    printed that the outline leaves out by design, listed there) and the whole set's."""
    from unseen import PRINTED as UNSEEN_PRINTED
    from unseen import TABLES as UNSEEN_TABLES

    rows: dict[str, dict[str, float]] = {}
    whole: Counter[str] = Counter()
    for path in paths:
        extra = UNSEEN_PRINTED.get(path.name) if printed else None
        counts = score_outlined(path, UNSEEN_TABLES.get(path.name), withheld=withheld, printed=extra)
        rows[path.name] = figures(counts)
        whole.update(counts)
    rows["all"] = figures(whole)
    return rows


def table(rows: dict[str, dict[str, float]]) -> str:
    """The figures as Markdown, one row per manual."""
    names = list(next(iter(rows.values())))
    out = "| manual | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names) + "\n"
    for manual, values in rows.items():
        out += f"| {manual} | " + " | ".join(f"{values[n]:.0f}" if "markdown" in n or "tables" in n
                                             else f"{values[n]:.3f}" for n in names) + " |\n"  # fmt: skip
    return out


@pytest.fixture(scope="module")
def real() -> dict[str, dict[str, float]]:
    """The real corpus scored once; the table is printed."""
    rows = score_real()
    print("\n" + table(rows))
    return rows


def test_the_real_corpus_is_small() -> None:
    assert sum(path.stat().st_size for path in REAL.iterdir()) < 2 * 1024 * 1024


def test_no_real_manual_breaks_its_markdown_or_reads_contents_as_a_table(real: dict[str, dict[str, float]]) -> None:
    assert real["all"]["broken markdown"] == 0
    assert real["all"]["contents pages as tables"] == 0


def test_real_tables_meet_their_target(real: dict[str, dict[str, float]]) -> None:
    assert real["all"]["table cells exact"] >= 0.9


def test_real_headings_meet_their_targets(real: dict[str, dict[str, float]]) -> None:
    assert real["all"]["heading precision"] >= 0.8
    assert real["all"]["heading recall"] >= 0.85


if __name__ == "__main__":
    sys.path.insert(0, str(REAL))
    print(table(score_real()))
    if len(sys.argv) > 1:
        from unseen import fetch

        paths = fetch() if sys.argv[1:] == ["--unseen"] else [Path(arg) for arg in sys.argv[1:]]
        print(table(score_unseen(paths)))
        print("The same, converted without their outlines (the typography alone):\n")
        print(table(score_unseen(paths, withheld=True)))
        print("As published, the truth with the headings their outlines leave out by design (tests/real/unseen.py):\n")
        print(table(score_unseen(paths, printed=True)))
        print("Without their outlines, the truth with the headings their outlines leave out by design:\n")
        print(table(score_unseen(paths, withheld=True, printed=True)))
