"""Test kit: deterministic fake engines per modality, so server and scheduler tests need no engine library."""

from hypnos.testing.fake_engine import FakeEngine, FakeOptions, fake_engine_kind

__all__ = ["FakeEngine", "FakeOptions", "fake_engine_kind"]
