"""Sampling parameters of a chat request and the llama.cpp sampler chain built from them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hypnos.chat import ChatInput

DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_P = 0.95
DEFAULT_TOP_K = 40
DEFAULT_MIN_P = 0.05


@dataclass(frozen=True)
class SamplingParams:
    """temperature, top_p, top_k and seed as the engine applies them (greedy when temperature is 0)."""

    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    top_k: int = DEFAULT_TOP_K
    seed: int = 0

    @property
    def greedy(self) -> bool:
        """True when sampling reduces to argmax."""
        return self.temperature <= 0.0

    @classmethod
    def from_request(cls, request: ChatInput) -> SamplingParams:
        """The request's sampling fields with engine defaults; no seed means a fresh random one."""
        given = request.sampling
        seed = given.seed if given.seed is not None else random.getrandbits(31)
        return cls(
            temperature=DEFAULT_TEMPERATURE if given.temperature is None else max(0.0, float(given.temperature)),
            top_p=DEFAULT_TOP_P if given.top_p is None else min(1.0, max(0.0, float(given.top_p))),
            top_k=DEFAULT_TOP_K if given.top_k is None else max(0, int(given.top_k)),
            seed=seed & 0xFFFFFFFF,
        )


def build_sampler_chain(lib: Any, params: SamplingParams) -> Any:
    """A llama.cpp sampler chain: greedy, or top_k -> top_p -> min_p -> temperature -> dist(seed)."""
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    if params.greedy:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        return chain
    if params.top_k > 0:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(params.top_p, 1))
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(DEFAULT_MIN_P, 1))
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(params.temperature))
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(params.seed))
    return chain


def free_sampler_chain(lib: Any, chain: Any) -> None:
    """Free a chain built by build_sampler_chain (its samplers go with it)."""
    if chain:
        lib.llama_sampler_free(chain)
