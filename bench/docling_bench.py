"""Documents: pages per second through Hypnos (streamed) against docling converting the whole document in-process.

Run from the repo root: `python -m bench.docling_bench` (needs hypnos-docling[docling,test]). On the same generated
20-page PDF in the same run, repetitions interleaved so that load from other processes hits both alike:
- direct: docling's NativePdfPipeline run in-process on the whole document, then its markdown exported;
- hypnos: `hypnos serve` (granian) on loopback, POST /v1/documents/convert with stream = true, read to [DONE].
The ratio is direct seconds / Hypnos seconds (>= 0.95 is the target; above 1 means Hypnos is faster). Also: the time
to the first page event against the whole streamed conversion, and seconds per scanned page with OCR (Hypnos,
after one warm-up that builds RapidOCR's sessions). With `--before CHECKOUT`: that checkout against this one (or
`--after`), pages/s and first-page latency on the layout corpus and the 20-page PDF, alternating (bench/docling_ab.py).
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

THREADS = 2


def direct_seconds(data: bytes) -> float:
    """docling's own native pipeline on the whole document, in-process, plus the markdown export."""
    from docling.backend.docling_parse_backend import ThreadedDoclingParseDocumentBackend
    from docling.datamodel.backend_options import ThreadedDoclingParseBackendOptions
    from docling.datamodel.base_models import InputFormat
    from docling.datamodel.document import InputDocument
    from docling.datamodel.pipeline_options import NativePdfPipelineOptions
    from docling.pipeline.native_pdf_pipeline import NativePdfPipeline

    started = time.perf_counter()
    options = NativePdfPipelineOptions(parser_threads=THREADS, generate_page_images=False)
    backend_options = ThreadedDoclingParseBackendOptions(
        parser_threads=THREADS, include_bitmap_images=True, render_pages=False
    )
    source = InputDocument(
        io.BytesIO(data), InputFormat.PDF, ThreadedDoclingParseDocumentBackend,
        backend_options=backend_options, filename="bench.pdf",
    )  # fmt: skip
    result = NativePdfPipeline(options).execute(source, raises_on_error=True)
    result.document.export_to_markdown()
    return time.perf_counter() - started


def hypnos_stream(http: object, data: bytes, filename: str) -> tuple[float, float, int]:
    """(seconds to [DONE], seconds to the first page event, pages) of one streamed conversion."""
    started = time.perf_counter()
    first = None
    pages = 0
    files = {"file": (filename, data)}
    with http.stream("POST", "/v1/documents/convert", data={"model": "docling", "stream": "true"}, files=files) as r:  # type: ignore[attr-defined]
        r.raise_for_status()
        for line in r.iter_lines():
            if '"document.page"' in line:
                pages += 1
                first = first if first is not None else time.perf_counter() - started
    return time.perf_counter() - started, first or float("nan"), pages


def main() -> None:
    """Print the table."""
    import httpx
    from hypnos_docling import testing
    from hypnos_server.testing import live_server

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--before", type=Path, help="an older checkout: compare it with --after instead (docling_ab)")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    if args.before:
        from bench import docling_ab

        docling_ab.run(hypnos_stream, args.before, args.after, rounds=args.reps, pages=args.pages, threads=THREADS)
        return
    document = testing.long_pdf(args.pages)
    scan = testing.scanned_pdf()
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "hypnos.toml"
        config.write_text(
            f'models_dir = "{folder}"\n\n[[models]]\nid = "docling"\nmodality = "document_conversion"\n'
            f'engine = "docling"\ninitial_tier = "tier1_gpu_vram"\n\n[models.docling]\nthreads = {THREADS}\n',
            encoding="utf-8",
        )
        with live_server(config) as url, httpx.Client(base_url=url, timeout=600) as http:
            direct_seconds(document)  # warm-up: imports, parser
            hypnos_stream(http, document, "bench.pdf")
            direct, served, first = [], [], []
            for _ in range(args.reps):
                direct.append(direct_seconds(document))
                total, to_first, pages = hypnos_stream(http, document, "bench.pdf")
                assert pages == args.pages, pages
                served.append(total)
                first.append(to_first)
            hypnos_stream(http, scan, "scan.pdf")  # warm-up: RapidOCR's sessions
            scans = [hypnos_stream(http, scan, "scan.pdf")[0] for _ in range(max(2, args.reps // 2))]
    med = statistics.median
    rows = [
        ("docling direct, whole document (pages/s)", args.pages / med(direct), args.pages / min(direct)),
        ("hypnos streamed (pages/s)", args.pages / med(served), args.pages / min(served)),
        ("ratio direct s / hypnos s (target >= 0.95)", med(direct) / med(served), min(direct) / min(served)),
        ("time to first page event (s)", med(first), min(first)),
        ("first page / whole conversion", med(first) / med(served), min(first) / min(served)),
        ("scanned page with OCR (s/page)", med(scans), min(scans)),
    ]
    print(f"docling bench: {args.pages}-page PDF, {args.reps} interleaved repetitions, parser/OCR threads {THREADS}")
    print(f"{'measure':48} {'median':>10} {'best':>10}")
    for name, median_value, best in rows:
        print(f"{name:48} {median_value:10.3f} {best:10.3f}")


if __name__ == "__main__":
    main()
