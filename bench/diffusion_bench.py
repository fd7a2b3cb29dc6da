"""Images: the tier 2 -> tier 1 promotion and one image end to end; Hypnos vs plain torch / diffusers, same run.

Run from the repo root: `python -m bench.diffusion_bench [--folder PIPELINE_DIR] [--size 512] [--steps 8]` (needs
torch and hypnos-diffusion[diffusers,test]). Without --folder it writes the tiny random pipeline of
hypnos_diffusion.testing into a temp folder (5 MB: promotion figures then say little; give a real folder for them).
- promotion: the engine's build (tier 2 -> 1) in bytes/s against a plain torch copy of the same number of bytes on the
  same machine (on a GPU: pinned host memory to the device, `non_blocking` and one synchronize). Ratio = Hypnos
  bytes/s / torch bytes/s (>= 0.8 is the target). On a CPU host the device is host memory: the engine moves nothing.
- image: one generation through `hypnos serve` (granian, HTTP, PNG + base64) against the same pipeline called
  in-process with the same arguments and a PNG encode, repetitions interleaved. Ratio = direct / Hypnos (>= 0.95).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _copy_baseline(nbytes: int, device: str, repeats: int) -> float:
    """Best seconds for a plain torch copy of nbytes host -> device (pinned on CUDA; a clone on the CPU)."""
    import torch

    source = torch.empty(nbytes, dtype=torch.uint8, pin_memory=device == "cuda")
    source.fill_(1)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        copy = source.to(device, non_blocking=True, copy=True)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
        del copy
    return best


def promotion(folder: Path, models_dir: Path, repeats: int) -> dict[str, Any]:
    """Best build time (tier 2 -> 1) of the engine, the bytes it holds, and the torch copy of as many bytes."""
    import torch
    from hypnos.config import settings_from_mapping
    from hypnos.engine import EngineContext
    from hypnos.types import LayerPlacementPlan, MemoryTier
    from hypnos_diffusion.plugin import make_engine
    from hypnos_diffusion.testing import model_table

    device = "cuda" if torch.cuda.is_available() else "cpu"
    table = model_table(str(folder), model_id="bench")
    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
    engine = make_engine(settings.models[0], EngineContext(models_dir=models_dir, limits=settings.limits,
                                                           accelerator=device))  # fmt: skip
    nbytes = engine.estimate().weight_bytes

    async def walk() -> float:
        await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER2))
        best = float("inf")
        for _ in range(repeats):
            phases = await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
            best = min(best, (phases.context_ms or 0.0) / 1000)
            await engine.demote(MemoryTier.TIER2)
        await engine.unload()
        return best

    hypnos_s = asyncio.run(walk())
    torch_s = _copy_baseline(nbytes, device, repeats)
    return {"device": device, "bytes": nbytes, "hypnos_s": hypnos_s, "torch_s": torch_s}


def images(folder: Path, models_dir: Path, size: int, steps: int, repeats: int) -> dict[str, Any]:
    """Median seconds for one image: through the server, and the same pipeline called in-process."""
    import httpx
    import torch
    from diffusers import DiffusionPipeline
    from hypnos_diffusion.pipeline import png_bytes
    from hypnos_diffusion.testing import model_table, toml_block
    from hypnos_server.testing import live_server

    pipe = DiffusionPipeline.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    prompt, cfg = "a lighthouse at dawn", 3.0

    def direct(seed: int) -> float:
        started = time.perf_counter()
        generator = [torch.Generator("cpu").manual_seed(seed)]
        out = pipe(prompt=prompt, num_inference_steps=steps, guidance_scale=cfg, width=size, height=size,
                   generator=generator, output_type="pil")  # fmt: skip
        png_bytes(out.images[0])
        return time.perf_counter() - started

    config = models_dir / "bench.toml"
    table = model_table(str(folder), model_id="bench", steps=steps)
    table["image"]["dtype"] = "float32"
    config.write_text(f'models_dir = "{models_dir}"\n\n' + toml_block(table))
    body = {"model": "bench", "prompt": prompt, "size": f"{size}x{size}", "steps": steps, "cfg_scale": cfg}
    served, called = [], []
    with live_server(config, env={"HYPNOS_PLUGINS": "diffusion"}, ready_timeout=300) as base:
        with httpx.Client(timeout=900) as client:
            client.post(f"{base}/v1/images/generations", json={**body, "seed": 0}).raise_for_status()  # load
            direct(0)  # warm
            for index in range(repeats):
                started = time.perf_counter()
                answer = client.post(f"{base}/v1/images/generations", json={**body, "seed": index + 1})
                answer.raise_for_status()
                base64.b64decode(answer.json()["data"][0]["b64_json"])
                served.append(time.perf_counter() - started)
                called.append(direct(index + 1))
    return {"hypnos_s": statistics.median(served), "direct_s": statistics.median(called)}


def main() -> None:
    """Run both measurements once and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="a diffusers pipeline folder (default: the tiny random one)")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        models_dir = Path(scratch)
        folder = args.folder
        if folder is None:
            from hypnos_diffusion.testing import write_tiny_pipeline

            folder = write_tiny_pipeline(models_dir / "tiny-sd")
        folder = folder.resolve()
        moved = promotion(folder, models_dir, args.repeats)
        image = images(folder, models_dir, args.size, args.steps, args.repeats)
    hypnos_rate = moved["bytes"] / moved["hypnos_s"] if moved["hypnos_s"] > 0 else float("inf")
    torch_rate = moved["bytes"] / moved["torch_s"]
    print(f"| measurement ({moved['device']}, {moved['bytes'] / 1e6:.1f} MB of weights) | Hypnos | baseline | ratio |")
    print("|---|---|---|---|")
    print(f"| promotion tier 2 -> 1 (GB/s) | {hypnos_rate / 1e9:.2f} | {torch_rate / 1e9:.2f} (torch copy) "
          f"| {hypnos_rate / torch_rate:.2f} |")  # fmt: skip
    print(f"| one {args.size}x{args.size} image, {args.steps} steps (s, median of {args.repeats}) "
          f"| {image['hypnos_s']:.3f} | {image['direct_s']:.3f} (diffusers in-process) "
          f"| {image['direct_s'] / image['hypnos_s']:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
