"""The one table the GPU check prints: per CUDA path, whether it ran, whether it passed, and its figure."""

from __future__ import annotations

import msgspec

NO_DEVICE = "no device"


class Row(msgspec.Struct, kw_only=True):
    """One CUDA path's outcome; `figure` is what it measured, `note` why it did not run or pass."""

    path: str
    ran: bool = False
    passed: bool = False
    figure: str = ""
    note: str = ""


def no_device(paths: list[str], reason: str = NO_DEVICE) -> list[Row]:
    """Every path as not run, with the same reason."""
    return [Row(path=path, note=reason) for path in paths]


def render(rows: list[Row], title: str = "") -> str:
    """A fixed-width text table (Markdown-compatible)."""
    head = ["path", "ran", "passed", "figure", "note"]
    cells = [
        [r.path, "yes" if r.ran else "no", ("yes" if r.passed else "NO") if r.ran else "-", r.figure, r.note]
        for r in rows
    ]
    widths = [max(len(head[i]), *(len(row[i]) for row in cells)) if cells else len(head[i]) for i in range(len(head))]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(value.ljust(width) for value, width in zip(values, widths, strict=True)) + " |"

    out = [title] if title else []
    out += [line(head), "|" + "|".join("-" * (width + 2) for width in widths) + "|"]
    out += [line(row) for row in cells]
    return "\n".join(out)


def ratio_row(path: str, measured: float, baseline: float, target: float, unit: str = "GB/s") -> Row:
    """A throughput against a baseline measured in the same run: passed when measured >= target x baseline."""
    if baseline <= 0:
        return Row(path=path, ran=True, passed=False, note="the baseline measured nothing")
    ratio = measured / baseline
    figure = f"{measured:.2f} vs {baseline:.2f} {unit} = {ratio:.2f}x (target >= {target:g}x)"
    return Row(path=path, ran=True, passed=ratio >= target, figure=figure)


def within(measured: float, reference: float, tolerance: float) -> bool:
    """Whether measured is within tolerance (a fraction) of reference."""
    if reference == 0:
        return measured == 0
    return abs(measured - reference) <= tolerance * abs(reference)


def agreement_row(path: str, pairs: list[tuple[str, float, float]], tolerance: float, unit: str = "MiB") -> Row:
    """Figures from two sources (name, ours, reference) that must agree within `tolerance`: passed when all do."""
    if not pairs:
        return Row(path=path, ran=True, passed=False, note="nothing to compare")
    bad = [name for name, ours, ref in pairs if not within(ours, ref, tolerance)]
    figure = ", ".join(f"{name} {ours:.0f}/{ref:.0f} {unit}" for name, ours, ref in pairs)
    note = f"off by more than {tolerance:.0%}: {', '.join(bad)}" if bad else f"within {tolerance:.0%}"
    return Row(path=path, ran=True, passed=not bad, figure=figure, note=note)


def summary(rows: list[Row]) -> str:
    """`N ran, M passed, K not run`."""
    ran = sum(r.ran for r in rows)
    return f"{ran} ran, {sum(r.passed for r in rows)} passed, {len(rows) - ran} not run"
