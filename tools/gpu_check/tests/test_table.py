"""The table and the comparisons the GPU check decides with."""

from __future__ import annotations

from tools.gpu_check.table import Row, agreement_row, no_device, ratio_row, render, summary, within


def test_a_promotion_at_eight_tenths_of_the_pinned_copy_passes_and_below_fails() -> None:
    assert ratio_row("promotion", 20.0, 25.0, 0.8).passed
    slow = ratio_row("promotion", 19.9, 25.0, 0.8)
    assert not slow.passed and "0.80x" in slow.figure and "target >= 0.8x" in slow.figure


def test_a_baseline_of_nothing_fails_instead_of_dividing_by_zero() -> None:
    row = ratio_row("promotion", 5.0, 0.0, 0.8)
    assert row.ran and not row.passed and "baseline" in row.note


def test_nvml_figures_pass_within_five_percent_of_nvidia_smi_and_name_the_one_off() -> None:
    assert within(104.9, 100.0, 0.05) and not within(105.1, 100.0, 0.05) and within(0, 0, 0.05)
    row = agreement_row("NVML", [("total", 81559, 81559), ("used", 1000, 1100)], 0.05)
    assert not row.passed and "used" in row.note and "total" not in row.note
    assert agreement_row("NVML", [("total", 81559, 81559)], 0.05).passed


def test_the_table_shows_every_path_and_what_did_not_run() -> None:
    rows = [*no_device(["llama full offload", "demotion"]), Row(path="NVML", ran=True, passed=False, figure="1/2 MiB")]
    text = render(rows, "title")
    lines = text.splitlines()
    assert lines[0] == "title" and len({len(line) for line in lines[1:]}) == 1  # aligned columns
    assert "| llama full offload" in text and "no device" in text and "| NO " in text
    assert summary(rows) == "1 ran, 0 passed, 2 not run"
