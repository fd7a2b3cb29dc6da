"""Hypnos server: the Litestar app and the `hypnos` CLI."""

from hypnos import __version__

__all__ = ["__version__"]
