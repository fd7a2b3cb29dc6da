"""Documents before/after: Hypnos checkouts serve docling side by side, measured round by round alternately.

`python -m bench docling --before /path/to/old/checkout [--after /path/to/new/checkout]` (default after: this
checkout). Each server runs `hypnos serve` with PYTHONPATH set to its checkout's `core/src`, `server/src` and
`plugins/hypnos-docling/src`, in this interpreter (same docling, docling-parse and RapidOCR builds, 2 threads). Rounds
alternate which server goes first. Workloads, streamed and read to [DONE]: the layout corpus of the plugin's tests
(reportlab, and Chromium's print-to-PDF where /usr/bin/chromium exists), one conversion per document a round, and a
generated 20-page PDF. Prints medians of pages/s and of the time to the first page event, with after / before.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Stream = Callable[[Any, bytes, str], tuple[float, float, int]]  # (seconds, seconds to the first page, pages)
SOURCES = ("core/src", "server/src", "plugins/hypnos-docling/src")
HERE = Path(__file__).resolve().parent.parent


def _config(folder: Path, name: str, threads: int) -> Path:
    config = folder / f"hypnos-{name}.toml"
    config.write_text(
        f'models_dir = "{folder}"\n\n[server]\nplugin_errors = "warn"\n\n'
        '[[models]]\nid = "docling"\nmodality = "document_conversion"\n'
        f'engine = "docling"\ninitial_tier = "tier1_gpu_vram"\n\n[models.docling]\nthreads = {threads}\n',
        encoding="utf-8",
    )
    return config


@contextlib.contextmanager
def _servers(checkouts: dict[str, Path], folder: Path, threads: int) -> Iterator[dict[str, str]]:
    from hypnos_server.testing import live_server

    with contextlib.ExitStack() as stack:
        urls = {}
        for name, checkout in checkouts.items():
            path = os.pathsep.join(str(checkout / source) for source in SOURCES)
            urls[name] = stack.enter_context(live_server(_config(folder, name, threads), env={"PYTHONPATH": path}))
        yield urls


def _corpus() -> list[tuple[str, bytes]]:
    sys.path.insert(0, str(HERE / "plugins" / "hypnos-docling" / "tests"))
    from docling_corpus import corpus

    return [(f"{truth.name}.pdf", pdf) for truth, pdf in corpus()]


def _round(stream: Stream, http: object, documents: list[tuple[str, bytes]]) -> tuple[float, float, int]:
    """(seconds, median seconds to the first page event, pages) converting every document once."""
    total, firsts, pages = 0.0, [], 0
    for name, data in documents:
        seconds, first, count = stream(http, data, name)
        total += seconds
        firsts.append(first)
        pages += count
    return total, statistics.median(firsts), pages


def run(stream: Stream, before: Path, after: Path, *, rounds: int, pages: int, threads: int) -> None:
    """Measure both checkouts alternately with `stream` (one streamed conversion) and print the table."""
    import httpx
    from hypnos_docling import testing

    checkouts = {"before": before.resolve(), "after": after.resolve()}
    workloads = {"corpus": _corpus(), f"{pages}-page PDF": [("long.pdf", testing.long_pdf(pages))]}
    rows: dict[tuple[str, str], dict[str, list[float]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="hypnos-docling-ab-") as folder,
        _servers(checkouts, Path(folder), threads) as urls,
    ):
        clients = {name: httpx.Client(base_url=url, timeout=600) for name, url in urls.items()}
        for client in clients.values():  # warm-up: imports, the parser, the page cache
            _round(stream, client, workloads["corpus"][:3])
        for number in range(rounds):
            order = list(clients) if number % 2 == 0 else list(reversed(clients))
            for workload, documents in workloads.items():
                for name in order:
                    seconds, first, count = _round(stream, clients[name], documents)
                    entry = rows.setdefault((workload, name), {"pages/s": [], "first page ms": []})
                    entry["pages/s"].append(count / seconds)
                    entry["first page ms"].append(first * 1000)
            print(f"round {number + 1}/{rounds} done ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
        for client in clients.values():
            client.close()
    print(f"\ndocling before/after, {rounds} alternating rounds (medians), parser/OCR threads {threads}")
    print(f"before {checkouts['before']}\nafter  {checkouts['after']}\n")
    print(f"{'workload':18} {'measure':16} {'before':>10} {'after':>10} {'after/before':>13}")
    for workload in workloads:
        for measure in ("pages/s", "first page ms"):
            old = statistics.median(rows[(workload, "before")][measure])
            new = statistics.median(rows[(workload, "after")][measure])
            print(f"{workload:18} {measure:16} {old:10.2f} {new:10.2f} {new / old:13.3f}")
