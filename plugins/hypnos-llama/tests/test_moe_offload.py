"""MoE expert offload: the plan's cpu_expert_layers become llama.cpp tensor overrides for those layers' experts."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
from hypnos_llama.gguf_meta import read_gguf
from hypnos_llama.moe_offload import expert_layers, expert_pattern
from hypnos_llama.testing import chat_request, collect, make_engine, tier1, write_tiny_llama


def test_the_pattern_matches_exactly_the_last_layers_experts(tmp_path: Path) -> None:
    names = [t.name for t in read_gguf(write_tiny_llama(tmp_path / "moe.gguf", layers=3, experts=4)).tensors]
    pattern = expert_pattern(expert_layers(3, 2))
    assert pattern is not None
    matched = sorted(name for name in names if re.search(pattern, name))
    expected = [f"blk.{layer}.ffn_{kind}_exps.weight" for layer in (1, 2) for kind in ("gate", "up", "down")]
    assert matched == sorted(expected)
    assert expert_pattern(expert_layers(3, 0)) is None
    assert expert_layers(3, 9) == [0, 1, 2]


async def test_a_moe_model_with_cpu_experts_loads_and_answers_the_same(tmp_path: Path) -> None:
    path = write_tiny_llama(tmp_path / "moe.gguf", experts=4)
    engine = make_engine(path, slots=1, context_len=1024)
    assert sum(engine.estimate().expert_bytes_per_layer) > 0
    request = chat_request("the capital of France", temperature=0)
    await engine.load(tier1(1024))
    try:
        assert engine.cpu_expert_pattern is None
        plain, _, _ = await collect(engine, request, max_tokens=8)
    finally:
        await engine.unload()
    await engine.load(msgspec.structs.replace(tier1(1024), cpu_expert_layers=1))
    try:
        assert engine.cpu_expert_pattern == expert_pattern([1])
        offloaded, final, _ = await collect(engine, request, max_tokens=8)
    finally:
        await engine.unload()
    assert final.completion_tokens == 8 and offloaded == plain  # on this CPU-only build the same kernels run


def test_llama_cpp_places_exactly_those_experts_in_host_memory(tmp_path: Path, capfd) -> None:  # type: ignore[no-untyped-def]
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaModel

    path = write_tiny_llama(tmp_path / "moe.gguf", layers=3, experts=4)
    model = LlamaModel(path, LlamaOptions(verbose=True), 99, cpu_experts=expert_pattern(expert_layers(3, 1)))
    model.close()
    log = capfd.readouterr().err
    overridden = sorted(re.findall(r"tensor (\S+) \(.*\) buffer type overridden to CPU", log))
    assert overridden == sorted(f"blk.2.ffn_{kind}_exps.weight" for kind in ("gate", "up", "down"))
