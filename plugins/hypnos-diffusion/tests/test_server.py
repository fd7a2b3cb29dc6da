"""Through the real server (granian, `hypnos serve`) and the OpenAI SDK: generations, edits, seeds, tiers, cancel."""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from hypnos_diffusion.testing import MODEL_ID, model_table, toml_block
from hypnos_server.testing import live_server
from PIL import Image

pytestmark = pytest.mark.model

PLAIN = "tiny-sd-plain"
FAST = {"steps": 3}


@pytest.fixture(scope="module")
def server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real server with the tiny pipeline twice: `tiny-sd` edits, `tiny-sd-plain` does not."""
    config = tmp_path_factory.mktemp("server") / "hypnos.toml"
    blocks = [toml_block(model_table(MODEL_ID)), toml_block(model_table(MODEL_ID, model_id=PLAIN, edit=False))]
    config.write_text(f'models_dir = "{models_dir}"\n\n' + "\n".join(blocks))
    with live_server(config, env={"HYPNOS_PLUGINS": "diffusion"}, ready_timeout=180) as base:
        yield base


@pytest.fixture
def sdk(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


def png(b64: str | None) -> Image.Image:
    assert b64 is not None
    data = base64.b64decode(b64)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return Image.open(io.BytesIO(data))


def generate(sdk: openai.OpenAI, **fields: Any) -> Any:
    extra = {key: fields.pop(key) for key in ("seed", "steps", "cfg_scale", "negative_prompt") if key in fields}
    return sdk.images.generate(
        model=fields.pop("model", MODEL_ID), prompt=fields.pop("prompt", "a lighthouse at dawn"),
        extra_body={**FAST, **extra}, **fields,
    )  # fmt: skip


def test_generation_is_a_png_of_the_clamped_size_with_seed_and_telemetry(sdk: openai.OpenAI) -> None:
    result = generate(sdk, size="300x270", seed=5, negative_prompt="text", cfg_scale=2.0)
    assert len(result.data) == 1
    assert png(result.data[0].b64_json).size == (288, 256)  # rounded down to multiples of 16 (spec section 11)
    assert result.data[0].seed == 5
    telemetry = result.hypnos_telemetry
    assert telemetry["engine"]["steps"] == 3 and telemetry["engine"]["steps_per_s"] > 0
    assert telemetry["placement"]["primary_tier"] == "tier1_gpu_vram"
    small = generate(sdk, size="16x16", seed=5)
    assert png(small.data[0].b64_json).size == (256, 256)  # clamped up to the minimum side


def test_same_seed_same_bytes_other_seed_other_bytes(sdk: openai.OpenAI) -> None:
    first = generate(sdk, size="256x256", seed=42).data[0].b64_json
    assert generate(sdk, size="256x256", seed=42).data[0].b64_json == first
    assert generate(sdk, size="256x256", seed=43).data[0].b64_json != first
    assert generate(sdk, size="256x256", seed=42, prompt="a fox in the snow").data[0].b64_json != first


def test_n_images_carry_seed_plus_index_and_each_seed_reproduces_its_image(sdk: openai.OpenAI) -> None:
    batch = generate(sdk, size="256x256", seed=100, n=2)
    assert [image.seed for image in batch.data] == [100, 101]
    assert batch.data[0].b64_json != batch.data[1].b64_json
    alone = generate(sdk, size="256x256", seed=101)
    assert alone.data[0].b64_json == batch.data[1].b64_json


def test_random_seed_is_reported_and_reproduces(sdk: openai.OpenAI) -> None:
    first = generate(sdk, size="256x256")
    seed = first.data[0].seed
    assert isinstance(seed, int) and seed >= 0
    assert generate(sdk, size="256x256", seed=seed).data[0].b64_json == first.data[0].b64_json


def _png_file(name: str, color: tuple[int, int, int]) -> tuple[str, bytes, str]:
    buffer = io.BytesIO()
    Image.new("RGB", (320, 320), color).save(buffer, format="PNG")
    return (name, buffer.getvalue(), "image/png")


def test_edit_with_one_and_with_two_references(sdk: openai.OpenAI) -> None:
    red, blue = _png_file("red.png", (220, 30, 30)), _png_file("blue.png", (30, 30, 220))
    body = {**FAST, "seed": 9}
    one = sdk.images.edit(model=MODEL_ID, prompt="give it a scarf", image=red, size="256x256", extra_body=body)
    picture = png(one.data[0].b64_json)
    assert picture.size == (256, 256) and one.data[0].seed == 9
    pixels = np.asarray(picture.convert("RGB"), dtype=np.float64)
    assert pixels[..., 0].mean() > pixels[..., 2].mean()  # the result starts from the red reference
    two = sdk.images.edit(model=MODEL_ID, prompt="give it a scarf", image=[red, blue], size="256x256",
                          extra_body=body)  # fmt: skip
    assert png(two.data[0].b64_json).size == (256, 256)
    assert two.data[0].b64_json != one.data[0].b64_json
    again = sdk.images.edit(model=MODEL_ID, prompt="give it a scarf", image=red, size="256x256", extra_body=body)
    assert again.data[0].b64_json == one.data[0].b64_json
    plain = generate(sdk, size="256x256", seed=9, prompt="give it a scarf")
    assert plain.data[0].b64_json != one.data[0].b64_json


def test_edit_refused_without_the_capability_and_with_a_mask(sdk: openai.OpenAI) -> None:
    red = _png_file("red.png", (220, 30, 30))
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.images.edit(model=PLAIN, prompt="scarf", image=red, extra_body=FAST)
    assert refused.value.status_code == 400 and "edit" in str(refused.value.body)
    with pytest.raises(openai.BadRequestError) as masked:
        sdk.images.edit(model=MODEL_ID, prompt="scarf", image=red, mask=red, extra_body=FAST)
    assert "mask" in str(masked.value.body)
    assert generate(sdk, model=PLAIN, size="256x256", seed=1).data[0].seed == 1  # it still generates


def _model_status(server: str, model_id: str) -> dict[str, Any]:
    models = httpx.get(f"{server}/v1/memory/status", timeout=30).json()["models"]
    return next(m for m in models if m["id"] == model_id)


def test_closing_the_connection_stops_the_job_and_frees_the_lease(server: str, sdk: openai.OpenAI) -> None:
    assert generate(sdk, model=PLAIN, size="256x256", seed=1).data[0].seed == 1  # loaded: the job starts at once
    body = {"model": PLAIN, "prompt": "a long job", "size": "512x512", "n": 4, "steps": 100, "seed": 3}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server}/v1/images/generations", json=body, timeout=httpx.Timeout(30, read=2.0))
    deadline = time.monotonic() + 300
    while _model_status(server, PLAIN)["active_leases"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _model_status(server, PLAIN)["active_leases"] == 0
    logged = httpx.get(f"{server}/v1/logs", params={"model": PLAIN, "limit": 1}, timeout=30).json()["records"][0]
    assert logged["status"] == 499, logged  # stopped at a step, not run through its 400 steps
    assert generate(sdk, model=PLAIN, size="256x256", seed=1).data[0].seed == 1


def test_tier_walk_through_the_server_keeps_answers_identical(server: str, sdk: openai.OpenAI) -> None:
    def move(tier: str) -> None:
        answer = httpx.post(f"{server}/v1/memory/tier", json={"model": MODEL_ID, "target_tier": tier}, timeout=120)
        assert answer.status_code == 200, answer.text
        assert _model_status(server, MODEL_ID)["current_tier"] == tier

    move("tier3_nvme_ssd")
    first = generate(sdk, size="256x256", seed=77)
    assert first.hypnos_telemetry["previous_tier"] == "tier3_nvme_ssd"
    for tier in ("tier2_pinned_ram", "tier1_gpu_vram", "tier2_pinned_ram", "tier3_nvme_ssd", "tier2_pinned_ram"):
        move(tier)
    again = generate(sdk, size="256x256", seed=77)
    assert again.hypnos_telemetry["previous_tier"] == "tier2_pinned_ram"
    assert again.data[0].b64_json == first.data[0].b64_json


def test_a_tier1_budget_short_of_the_whole_model_splits_the_denoiser(
    models_dir: Path, tmp_path: Path, sdk: openai.OpenAI
) -> None:
    from hypnos.config import settings_from_mapping
    from hypnos.engine import EngineContext
    from hypnos_diffusion.plugin import make_engine

    table = model_table(MODEL_ID)
    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
    estimate = make_engine(settings.models[0], EngineContext(models_dir=models_dir, limits=settings.limits)).estimate()
    layers = estimate.layer_bytes
    # room for the text encoder, vae, workspace and the first three of the five blocks, not for the fourth
    budget = estimate.non_layer_bytes + sum(layers[:3]) + estimate.workspace_bytes + layers[3] // 2
    config = tmp_path / "split.toml"
    config.write_text(f'models_dir = "{models_dir}"\n[hardware]\nvram_budget_bytes = {budget}\n\n' + toml_block(table))
    whole = generate(sdk, size="256x256", seed=21).data[0].b64_json  # the module's server: the whole model on tier 1
    with live_server(config, env={"HYPNOS_PLUGINS": "diffusion"}, ready_timeout=180) as base:
        split = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)
        result = generate(split, size="256x256", seed=21)
    placement = result.hypnos_telemetry["placement"]
    assert (placement["gpu_layers"], placement["pinned_ram_layers"]) == (3, 2)
    assert placement["pinned_ram_bytes"] == sum(layers[3:])
    assert result.data[0].b64_json == whole  # the streamed blocks compute the same image
