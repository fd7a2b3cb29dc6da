"""Hypnos docling plugin: document conversion with per-page streaming, OCR and a picture store."""
