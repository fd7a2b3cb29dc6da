"""Sampling parameters from the request."""

from __future__ import annotations

from hypnos_llama.sampling import DEFAULT_TOP_K, SamplingParams
from hypnos_llama.testing import chat_request


def _request(**fields):
    return chat_request("x", **fields)


def test_defaults_and_greedy() -> None:
    params = SamplingParams.from_request(_request(seed=7))
    assert params.top_k == DEFAULT_TOP_K and params.seed == 7 and not params.greedy
    assert SamplingParams.from_request(_request(temperature=0)).greedy


def test_values_are_clamped() -> None:
    params = SamplingParams.from_request(_request(temperature=-1, top_p=3, top_k=-5))
    assert params.temperature == 0 and params.top_p == 1.0 and params.top_k == 0
