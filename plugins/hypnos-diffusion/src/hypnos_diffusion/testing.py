"""A tiny random Stable Diffusion pipeline written from configs (no hub), served through the real engine path.

`python -m hypnos_diffusion.testing DIR` writes one into DIR/tiny-sd and prints the `[[models]]` block that serves
it with DIR as models_dir.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

MODEL_ID = "tiny-sd"


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode table: 256 printable characters standing for the 256 bytes."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars = list(keep)
    extra = 0
    for byte in range(256):
        if byte not in keep:
            chars.append(256 + extra)
            extra += 1
    return [chr(c) for c in chars]


def tiny_tokenizer() -> Any:
    """A CLIP tokenizer over the byte-level alphabet (every character a token, no merges)."""
    from transformers import CLIPTokenizer

    alphabet = _byte_alphabet()
    tokens = ["<|startoftext|>", "<|endoftext|>", *alphabet, *(f"{c}</w>" for c in alphabet)]
    return CLIPTokenizer(vocab={token: index for index, token in enumerate(tokens)}, merges=[], model_max_length=77)


def write_tiny_pipeline(folder: Path, seed: int = 0) -> Path:
    """Write a ~5 MB random StableDiffusionPipeline (safetensors) into `folder`; the same seed, the same weights."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=32, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32, norm_num_groups=16, attention_head_dim=8,
    )  # fmt: skip
    vae = AutoencoderKL(
        block_out_channels=(16, 16, 32, 32), in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=8,
        sample_size=256,
    )  # fmt: skip
    tokenizer = tiny_tokenizer()
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=77, bos_token_id=0, eos_token_id=1, pad_token_id=1,
        )
    )  # fmt: skip
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        unet=unet, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(folder), safe_serialization=True)
    return folder


def model_table(weights_path: str, model_id: str = MODEL_ID, edit: bool = True, steps: int = 4) -> dict[str, Any]:
    """The `[[models]]` table serving a tiny pipeline at `weights_path` (relative to models_dir)."""
    image: dict[str, Any] = {"steps": steps, "cfg_scale": 3.0, "workspace_size": "512x512"}
    if edit:
        image["edit"] = True
    table = {"id": model_id, "modality": "image_generation", "engine": "diffusers", "weights_path": weights_path}
    return {**table, "image": image}


def toml_block(table: dict[str, Any]) -> str:
    """A `[[models]]` table as TOML text (flat keys plus one `[models.image]` sub-table)."""

    def value(item: Any) -> str:
        if isinstance(item, bool):
            return "true" if item else "false"
        return repr(item) if isinstance(item, (int, float)) else f'"{item}"'

    lines = ["[[models]]"] + [f"{k} = {value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for name, sub in table.items():
        if isinstance(sub, dict):
            lines += [f"[models.{name}]"] + [f"{k} = {value(v)}" for k, v in sub.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the tiny pipeline into DIR/tiny-sd (whole or not at all) and print the [[models]] block serving it."""
    parser = argparse.ArgumentParser(prog="python -m hypnos_diffusion.testing", description=main.__doc__)
    parser.add_argument("models_dir", type=Path)
    args = parser.parse_args(argv)
    from hypnos.kit.starter import write_folder_atomically

    write_folder_atomically(args.models_dir / MODEL_ID, write_tiny_pipeline)  # a failed write leaves no folder
    sys.stdout.write(f'models_dir = "{args.models_dir.resolve()}"\n\n' + toml_block(model_table(MODEL_ID)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
