"""Repository tools (not a published package)."""
