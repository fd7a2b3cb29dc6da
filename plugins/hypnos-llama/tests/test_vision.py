"""Images in chat on a tiny random Qwen2-VL (GGUF + mmproj from llama.cpp's converter): the image reaches the model."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import io
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypnos.config import LimitsConfig
from hypnos.errors import HypnosError
from hypnos.types import Modality
from hypnos_llama.testing import chat_request, collect, make_engine, tier1

pytest.importorskip("PIL", reason="the vision tests need pillow")

from hypnos_llama.media_input import decode_image, decode_wav
from hypnos_llama.multimodal import projector_modalities
from hypnos_llama.testing_vision import image_part, input_part, make_vision_engine, png_bytes, vision_request


@pytest.fixture(scope="module")
def vl_engine(tiny_vision: Any) -> Iterator[Any]:
    """The tiny vision engine loaded in tier 1 (2 slots), shared by the module's tests (each runs its own loop)."""
    engine = make_vision_engine(tiny_vision)
    engine.test_phases = asyncio.run(engine.load(tier1(4096)))
    yield engine
    asyncio.run(engine.unload())


def _wav(seconds: float = 0.2, rate: int = 8000, channels: int = 1, frequency: float = 440.0) -> bytes:
    import numpy as np

    times = np.arange(int(seconds * rate)) / rate
    samples = (8000 * np.sin(2 * np.pi * frequency * times)).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.repeat(samples, channels).tobytes())
    return buffer.getvalue()


def _audio_part(data: bytes) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}}


# ---- decoding, without a model -------------------------------------------------------------------------------------


def test_images_decode_to_rgb_and_the_limit_counts_decoded_bytes() -> None:
    for image_format in ("PNG", "JPEG", "WEBP", "GIF"):
        item = decode_image(png_bytes((30, 20), image_format=image_format), max_bytes=1 << 20, max_pixels=1 << 20)
        assert (item.width, item.height) == (30, 20) and len(item.data) == 30 * 20 * 3
    small_file = png_bytes((400, 400))  # a few hundred bytes of PNG, 480 000 bytes of pixels
    assert len(small_file) < 10_000
    with pytest.raises(HypnosError) as raised:
        decode_image(small_file, max_bytes=100_000, max_pixels=1 << 20)
    assert raised.value.status == 400 and "400x400" in raised.value.message
    with pytest.raises(HypnosError) as raised:
        decode_image(b"\x89PNG\r\n\x1a\nnot really", max_bytes=1 << 20, max_pixels=1 << 20)
    assert raised.value.status == 400 and "could not be decoded" in raised.value.message


def test_the_pixel_limit_is_checked_from_the_header_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    image = png_bytes((400, 300))
    with pytest.raises(HypnosError) as raised:
        decode_image(image, max_bytes=1 << 24, max_pixels=100_000)
    assert raised.value.status == 400 and "400x300" in raised.value.message
    assert "max_image_pixels" in raised.value.message

    def no_decoding(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Pillow decoded an image the header already refused")

    files = [png_bytes((400, 300), image_format=image_format) for image_format in ("PNG", "JPEG", "WEBP", "GIF", "BMP")]
    monkeypatch.setattr(Image.Image, "convert", no_decoding)
    monkeypatch.setattr(Image.Image, "load", no_decoding)
    for data in files:
        with pytest.raises(HypnosError) as raised:
            decode_image(data, max_bytes=1 << 24, max_pixels=100_000)
        assert "400x300" in raised.value.message


def test_wav_decodes_to_mono_float_at_the_projector_rate() -> None:
    item = decode_wav(_wav(0.5, rate=8000, channels=2), sample_rate=16000)
    assert item.kind == "audio" and abs(item.samples - 8000) <= 2
    with pytest.raises(HypnosError) as raised:
        decode_wav(b"RIFF....WAVEjunk", sample_rate=16000)
    assert raised.value.status == 400


# ---- the tiny vision model -----------------------------------------------------------------------------------------


def _encoded(container: str, codec: str, seconds: float = 1.0, rate: int = 22050) -> bytes:
    """A 440 Hz tone encoded with PyAV (FFmpeg) in another container than WAV."""
    import av
    import numpy as np

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * rate)) / rate)).astype(np.float32)
        for start in range(0, tone.size, 1152):
            frame = av.AudioFrame.from_ndarray(tone[None, start : start + 1152], format="flt", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("container", "codec", "rate"), [("flac", "flac", 22050), ("mp3", "libmp3lame", 22050), ("ogg", "libopus", 48000)]
)
def test_other_audio_containers_decode_to_the_same_tone(container: str, codec: str, rate: int) -> None:
    import numpy as np

    pytest.importorskip("av", reason="containers other than WAV are decoded with PyAV")
    from hypnos_llama.media_input import decode_audio

    encoded = _encoded(container, codec, rate=rate)
    assert encoded[:4] != b"RIFF"
    item = decode_audio(encoded, sample_rate=16000, max_bytes=1 << 24)
    samples = np.frombuffer(item.data, dtype="<f4")
    assert 0.9 * 16000 <= samples.size <= 1.15 * 16000  # codecs pad by up to a frame or two
    spectrum = np.abs(np.fft.rfft(samples))
    assert abs(np.argmax(spectrum) * 16000 / samples.size - 440) < 5
    with pytest.raises(HypnosError) as too_big:
        decode_audio(encoded, sample_rate=16000, max_bytes=16000)
    assert too_big.value.status == 400 and "limit" in too_big.value.message
    with pytest.raises(HypnosError) as garbage:
        decode_audio(b"ID3 this is not audio at all" * 10, sample_rate=16000, max_bytes=1 << 24)
    assert garbage.value.status == 400


def test_projector_header_says_vision(tiny_vision: Any) -> None:
    assert projector_modalities(tiny_vision.projector) == [Modality.VISION]


async def test_projector_counts_in_estimate_load_and_modalities(vl_engine: Any, tiny_vision: Any) -> None:
    estimate = vl_engine.estimate()
    assert estimate.projector_bytes > 0.8 * tiny_vision.projector.stat().st_size
    assert vl_engine.test_phases.projector_ms is not None and vl_engine.test_phases.projector_ms >= 0
    assert Modality.VISION in vl_engine.served_modalities()
    assert Modality.SPEECH_TO_TEXT not in vl_engine.served_modalities()
    assert vl_engine.model.all_modalities == [Modality.TEXT_GENERATION]  # the config is never changed


async def test_the_projector_pages_move_with_the_model_between_tiers(tiny_vision: Any) -> None:
    from hypnos.types import LayerPlacementPlan, MemoryTier

    engine = make_vision_engine(tiny_vision)
    assert not engine.projector_pages_held
    phases = await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER2))
    assert engine.projector_pages_held and phases.context_ms is None
    await engine.load(tier1(1024))
    await engine.demote(MemoryTier.TIER2)
    assert engine.projector_pages_held  # tier 2 keeps them warm for the next promotion
    await engine.demote(MemoryTier.TIER3)
    assert not engine.projector_pages_held


async def test_the_image_reaches_the_model(vl_engine: Any) -> None:
    _, plain, _ = await collect(vl_engine, vision_request("What is  this?", temperature=0), max_tokens=2)
    _, small, _ = await collect(
        vl_engine, vision_request("What is ", image_part(png_bytes((56, 56))), " this?", temperature=0), max_tokens=2
    )
    _, large, _ = await collect(
        vl_engine, vision_request("What is ", image_part(png_bytes((280, 280))), " this?", temperature=0), max_tokens=2
    )
    # Qwen2-VL: one token per merged 28x28 px patch; 56x56 px = 2x2 (raised to the projector's minimum), 280x280
    # px = 10x10 = 100 tokens; the image's begin/end markers add a token or two
    assert small.prompt_tokens >= plain.prompt_tokens + 4
    assert large.prompt_tokens >= plain.prompt_tokens + 100
    assert small.completion_tokens == 2 and large.completion_tokens == 2


async def test_the_answer_depends_on_the_pixels(vl_engine: Any) -> None:
    answers = set()
    for color in ((255, 0, 0), (0, 0, 255), (0, 0, 255)):
        text, final, _ = await collect(
            vl_engine,
            vision_request("Describe", image_part(png_bytes((84, 84), color)), temperature=0, seed=1),
            max_tokens=12,
        )
        assert final.completion_tokens >= 1
        answers.add(text)
    assert len(answers) == 2  # blue twice gives the same answer; red another one


async def test_a_later_turn_about_the_same_image_reuses_its_cells(vl_engine: Any) -> None:
    def turn(image: dict[str, Any], answer: str) -> Any:
        first = [input_part("Describe "), input_part(image), input_part(" briefly.")]
        return chat_request(first, answer, "And its colour?", temperature=0)

    green = image_part(png_bytes((112, 112), color=(10, 200, 30)))
    answer, first, _ = await collect(
        vl_engine, vision_request("Describe ", green, " briefly.", temperature=0), max_tokens=4
    )
    reply, second, _ = await collect(vl_engine, turn(green, answer), max_tokens=4)
    # the image (16 cells at 112x112) and the text around it come from the cache: only the new turn is prefilled
    assert second.cached_tokens >= first.prompt_tokens - 1
    for slot in vl_engine._batch.slots:  # the same turn with nothing cached gives the same answer
        vl_engine._batch.context.seq_trim(slot.seq_id, 0)
        slot.cached, slot.media = [], False
    fresh_reply, fresh, _ = await collect(vl_engine, turn(green, answer), max_tokens=4)
    assert fresh.cached_tokens == 0 and fresh_reply == reply
    blue = image_part(png_bytes((112, 112), color=(10, 30, 200)))
    _, other, _ = await collect(vl_engine, turn(blue, answer), max_tokens=4)
    assert other.prompt_tokens == second.prompt_tokens
    assert other.cached_tokens < 16  # another image at the same place: its cells are computed anew


def cached_vision_engine(tiny_vision: Any, tmp_path: Path, *, parking: bool) -> Any:
    """The tiny vision engine with one slot, a prompt cache (states of 64 tokens or more) and KV parking on or off."""
    from hypnos.config import KvParkConfig, PromptCacheConfig
    from hypnos.scheduler.kv_park import KvParkStore
    from hypnos.scheduler.prompt_cache import PromptCacheStore

    engine = make_vision_engine(tiny_vision, slots=1)
    engine.model.prompt_cache = settings = PromptCacheConfig(min_tokens=64)
    engine.context.prompt_cache = store = PromptCacheStore(tmp_path / "cache", lambda model_id: settings)
    engine.context.kv_park = KvParkStore(KvParkConfig(enabled=parking))
    engine.context.kv_park.attach_prompt_cache(store)
    return engine


IMAGE_TURN = ("Describe ", image_part(png_bytes((224, 224))), " briefly.")  # 64 image tokens: worth saving


async def test_a_conversation_about_an_image_survives_a_tier_move_with_kv_parking(
    tiny_vision: Any, tmp_path: Path
) -> None:
    from hypnos.types import MemoryTier

    engine = cached_vision_engine(tiny_vision, tmp_path, parking=True)
    await engine.load(tier1(2048))
    try:
        request = vision_request(*IMAGE_TURN, temperature=0)
        _, first, _ = await collect(engine, request, max_tokens=4)
        await engine.demote(MemoryTier.TIER2)
        (parked,) = engine.context.kv_park.status().models  # in the prompt cache, under the park cap
        assert parked.tokens >= first.prompt_tokens
        await engine.load(tier1(2048))
        assert engine.context.kv_park.status().models == []  # back in tier 1: found by prefix from now on
        _, again, _ = await collect(engine, request, max_tokens=4)
        assert again.cached_tokens == first.prompt_tokens - 1  # the image is not encoded again
        assert engine.context.prompt_cache.hits["ram"] == 1
    finally:
        await engine.unload()


async def test_a_conversation_about_an_image_comes_back_from_the_prompt_cache(tiny_vision: Any, tmp_path: Path) -> None:
    engine = cached_vision_engine(tiny_vision, tmp_path, parking=False)
    await engine.load(tier1(2048))
    try:
        request = vision_request(*IMAGE_TURN, temperature=0)
        _, before, _ = await collect(engine, request, max_tokens=4)
        other = chat_request("another conversation entirely, which takes the only slot: " + "red green blue. " * 30)
        await collect(engine, other, max_tokens=4)  # its slot is saved first, media cells and all
        _, after, _ = await collect(engine, request, max_tokens=4)
        assert after.cached_tokens == before.prompt_tokens - 1  # restored: the image is not encoded again
        # another image at the same place shares only the text before it: its cells are computed anew
        blue = vision_request("Describe ", image_part(png_bytes((224, 224), color=(0, 0, 255))), " briefly.")
        _, changed, _ = await collect(engine, blue, max_tokens=4)
        assert changed.cached_tokens < 16
    finally:
        await engine.unload()


async def test_png_jpeg_and_webp_all_work(vl_engine: Any) -> None:
    for image_format, mime in (("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")):
        part = image_part(png_bytes((60, 40), image_format=image_format), mime)
        _, final, _ = await collect(vl_engine, vision_request("look", part), max_tokens=3)
        assert final.finish_reason in ("length", "stop") and final.prompt_tokens > 8, image_format


async def test_a_corrupt_image_is_a_400_and_the_engine_keeps_serving(vl_engine: Any) -> None:
    corrupt = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"nope").decode()}}
    with pytest.raises(HypnosError) as raised:
        await collect(vl_engine, vision_request("look", corrupt))
    assert raised.value.status == 400 and raised.value.type == "invalid_request_error"
    _, final, _ = await collect(vl_engine, vision_request("still there?"), max_tokens=2)
    assert final.completion_tokens == 2


async def test_audio_to_a_vision_only_projector_is_a_400(vl_engine: Any) -> None:
    with pytest.raises(HypnosError) as raised:
        await collect(vl_engine, vision_request("what is said?", _audio_part(_wav())))
    assert raised.value.status == 400 and "audio" in raised.value.message


async def test_images_and_text_requests_batch_together(vl_engine: Any) -> None:
    async def one(i: int) -> Any:
        if i % 2:
            request = vision_request(f"picture {i}", image_part(png_bytes((56 + 28 * i, 56))), temperature=0)
        else:
            request = chat_request(f"text {i}", model="tiny-vl", temperature=0)
        return await collect(vl_engine, request, max_tokens=6)

    results = await asyncio.gather(*(one(i) for i in range(4)))
    assert all(final.completion_tokens >= 1 for _, final, _ in results)
    alone, _, _ = await collect(
        vl_engine, vision_request("picture 1", image_part(png_bytes((84, 56))), temperature=0), max_tokens=6
    )
    assert alone == results[1][0]  # the same answer alone as beside other requests


async def test_a_too_large_image_is_a_400(tiny_vision: Any) -> None:
    engine = make_vision_engine(tiny_vision, limits=LimitsConfig(max_image_bytes=10_000), model_id="tiny-vl-small")
    await engine.load(tier1(2048))
    try:
        with pytest.raises(HypnosError) as raised:
            await collect(engine, vision_request("look", image_part(png_bytes((200, 200)))))
        assert raised.value.status == 400
    finally:
        await engine.unload()


async def test_an_image_to_a_model_without_projector_is_a_400(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, slots=1, model_id="no-projector")
    await engine.load(tier1(2048))
    try:
        with pytest.raises(HypnosError) as raised:
            await collect(engine, vision_request("look", image_part(png_bytes()), model="no-projector"))
        assert raised.value.status == 400 and "image" in raised.value.message
    finally:
        await engine.unload()


# ---- the tiny audio model (Qwen2-Audio: a whisper-style encoder) ---------------------------------------------------


async def test_audio_reaches_the_model_and_images_are_refused(tiny_audio: Any) -> None:
    engine = make_vision_engine(tiny_audio, slots=1, model_id="tiny-audio")
    await engine.load(tier1(4096))
    try:
        assert Modality.SPEECH_TO_TEXT in engine.served_modalities()
        assert Modality.VISION not in engine.served_modalities()
        _, plain, _ = await collect(engine, vision_request("What is  said?", model="tiny-audio"), max_tokens=2)
        _, heard, _ = await collect(
            engine,
            vision_request("What is ", _audio_part(_wav(1.0, rate=22050, channels=2)), " said?", model="tiny-audio"),
            max_tokens=2,
        )
        # whisper's encoder sees a 30 s window: 1500 frames, pooled by 2 into 750 tokens
        assert heard.prompt_tokens >= plain.prompt_tokens + 700  # a random model may end its answer at once
        assert heard.finish_reason in ("length", "stop")
        with pytest.raises(HypnosError) as raised:
            await collect(engine, vision_request("look", image_part(png_bytes()), model="tiny-audio"))
        assert raised.value.status == 400 and "image" in raised.value.message
        with pytest.raises(HypnosError) as raised:
            await collect(engine, vision_request("hear", _audio_part(b"RIFFxxxxWAVEnothing"), model="tiny-audio"))
        assert raised.value.status == 400
        if importlib.util.find_spec("av") is not None:  # other containers: decoded with PyAV, same clip tokens
            flac = {
                "type": "input_audio",
                "input_audio": {"data": base64.b64encode(_encoded("flac", "flac")).decode(), "format": "flac"},
            }
            _, from_flac, _ = await collect(
                engine, vision_request("What is ", flac, " said?", model="tiny-audio"), max_tokens=2
            )
            assert from_flac.prompt_tokens == heard.prompt_tokens
    finally:
        await engine.unload()
