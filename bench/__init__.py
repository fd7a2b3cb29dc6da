"""Benchmarks: run as `python -m bench.<name>` from the repo root; each prints ratios against a same-run baseline."""
