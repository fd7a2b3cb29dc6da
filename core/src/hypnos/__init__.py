"""Hypnos core: types, config, hookspecs, engine protocol and the tier scheduler."""

__version__ = "0.1.0"
