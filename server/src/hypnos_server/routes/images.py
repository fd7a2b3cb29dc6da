"""POST /v1/images/generations and POST /v1/images/edits (section 11)."""

from __future__ import annotations

import base64
import random
import re
import time
from typing import Any

from hypnos.config import LimitsConfig
from hypnos.engine import ImageInput
from hypnos.errors import clip, invalid_request
from hypnos.image_header import check_image_pixels
from hypnos.openai import ImageGenerationRequest
from hypnos.types import Modality
from litestar import Request, Response, post
from litestar.datastructures import UploadFile

from hypnos_server.routes.inference import InferenceRun, decode_json, json_response, read_form, ready_guard
from hypnos_server.state import hypnos_state, request_context

MIN_SIDE, MAX_SIDE, SIDE_STEP = 256, 2048, 16
SIZE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")
SEED_RANGE = 2**32


def clamp_side(value: int) -> int:
    """Clamp to 256..2048, then round down to a multiple of 16."""
    return min(MAX_SIDE, max(MIN_SIDE, value)) // SIDE_STEP * SIDE_STEP


def parse_size(size: str) -> tuple[int, int]:
    """`WIDTHxHEIGHT` clamped and rounded (1000x700 -> 992x688)."""
    match = SIZE.match(size)
    if not match:
        raise invalid_request(f"Invalid value for `size`: `{size}` (expected WIDTHxHEIGHT, e.g. 1024x1024)")
    return clamp_side(int(match.group(1))), clamp_side(int(match.group(2)))


def image_job(body: ImageGenerationRequest, limits: LimitsConfig, references: list[bytes]) -> ImageInput:
    """The engine job: n checked, size clamped, steps clamped, seed chosen when absent."""
    if not body.prompt.strip():
        raise invalid_request("`prompt` must not be empty")
    if len(body.prompt) > limits.max_prompt_chars:
        raise invalid_request("The prompt is longer than limits.max_prompt_chars")
    if not 1 <= body.n <= limits.max_images_per_request:
        raise invalid_request(
            f"Invalid value for `n`: expected 1..{limits.max_images_per_request} (limits.max_images_per_request)"
        )
    width, height = parse_size(body.size)
    steps = None if body.steps is None else min(100, max(1, body.steps))
    seed = body.seed if body.seed is not None else random.randrange(SEED_RANGE)
    return ImageInput(
        prompt=body.prompt,
        n=body.n,
        width=width,
        height=height,
        negative_prompt=body.negative_prompt,
        steps=steps,
        seed=seed,
        cfg_scale=body.cfg_scale,
        references=references,
    )


async def _generate(
    request: Request[Any, Any, Any], body: ImageGenerationRequest, references: list[bytes]
) -> Response[bytes]:
    state = hypnos_state(request)
    context = request_context(request)
    context.record.model = body.model
    job = image_job(body, state.settings.limits, references)
    model = state.scheduler.serving(body.model, Modality.IMAGE_GENERATION)
    if references and (model.engine is None or not model.engine.capabilities().image_edit):
        raise invalid_request(f"The model `{body.model}` does not edit images")
    async with InferenceRun(request, body.model, [Modality.IMAGE_GENERATION]) as run:
        result = await run.call(lambda engine: engine.generate_images(job, run.lease.cancel))
        telemetry = run.telemetry(result.timing)
        headers = run.headers()
    context.record.input_text = body.prompt  # observability
    data = [
        {"b64_json": base64.b64encode(image.png).decode("ascii"), "seed": job.seed + index}
        for index, image in enumerate(result.images)
    ]
    return json_response({"created": int(time.time()), "data": data, "hypnos_telemetry": telemetry}, headers=headers)


@post("/v1/images/generations", guards=[ready_guard], status_code=200)
async def generations(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Generate n images as base64 PNG, each with the seed it was made with."""
    body = await decode_json(request, ImageGenerationRequest)
    return await _generate(request, body, [])


def _form_int(form: Any, name: str) -> int | None:
    value = form.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise invalid_request(f"Invalid value for `{name}`: expected an integer") from None


@post("/v1/images/edits", guards=[ready_guard], status_code=200)
async def edits(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Edit (or compose from) uploaded reference images as the prompt says (multipart)."""
    limits = hypnos_state(request).settings.limits
    if not request.headers.get("content-type", "").startswith("multipart/"):
        raise invalid_request("POST /v1/images/edits takes multipart/form-data (model, prompt, image)")
    form = await read_form(request)
    if form.get("mask") not in (None, ""):
        raise invalid_request("`mask` is not supported: the models edit from the prompt and the references")
    files = [f for name in ("image", "image[]") for f in form.getall(name, []) if isinstance(f, UploadFile)]
    if not files:
        raise invalid_request("Missing required field `image` (one or more image files)")
    references = []
    for upload in files:
        data = await upload.read()
        if len(data) > limits.max_image_bytes:
            raise invalid_request(f"The image `{clip(upload.filename)}` is larger than limits.max_image_bytes")
        check_image_pixels(data, limits.max_image_pixels, f"The image `{clip(upload.filename)}`")
        references.append(data)
    model, prompt = form.get("model"), form.get("prompt")
    if not isinstance(model, str) or not model:
        raise invalid_request("Missing required field `model`")
    if not isinstance(prompt, str):
        raise invalid_request("Missing required field `prompt`")
    cfg = form.get("cfg_scale")
    try:
        cfg_scale = float(cfg) if cfg not in (None, "") else None
    except (TypeError, ValueError):
        raise invalid_request("Invalid value for `cfg_scale`: expected a number") from None
    n = _form_int(form, "n")
    body = ImageGenerationRequest(
        model=model,
        prompt=prompt,
        negative_prompt=form.get("negative_prompt") or None,
        n=1 if n is None else n,
        size=form.get("size") or "1024x1024",
        steps=_form_int(form, "steps"),
        seed=_form_int(form, "seed"),
        cfg_scale=cfg_scale,
    )
    return await _generate(request, body, references)


ROUTES = [generations, edits]
