"""Hypnos GLiNER plugin: zero-shot entity extraction served at POST /v1/entities."""
