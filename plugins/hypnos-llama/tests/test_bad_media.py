"""A chat image or audio part that is not one is a 400 whose message carries no repr, path or exception text."""

from __future__ import annotations

import pytest
from hypnos.chat import chat_input
from hypnos.errors import HypnosError
from hypnos.testing.clean_errors import assert_clean_message
from hypnos_llama.media_input import decode_audio, decode_image
from hypnos_llama.template import ChatTemplate

NOT_MEDIA = [b"%PDF-1.7 not an image", b"GIF89a truncated", b"\x89PNG\r\n\x1a\n" + b"\0" * 40, b""]


@pytest.mark.parametrize("data", NOT_MEDIA)
def test_an_image_part_that_is_no_image_is_a_clean_400(data: bytes) -> None:
    with pytest.raises(HypnosError) as caught:
        decode_image(data, max_bytes=1 << 20, max_pixels=1 << 20)
    assert caught.value.status == 400
    assert_clean_message(caught.value.message)


@pytest.mark.parametrize("data", [*NOT_MEDIA, b"RIFF\x10\0\0\0WAVEfmt "])
def test_an_audio_part_that_is_no_audio_is_a_clean_400(data: bytes) -> None:
    with pytest.raises(HypnosError) as caught:
        decode_audio(data, sample_rate=16000, max_bytes=1 << 20)
    assert caught.value.status == 400
    assert_clean_message(caught.value.message)


def test_a_template_that_cannot_render_the_conversation_is_a_clean_400() -> None:
    template = ChatTemplate("{{ messages[0].content.nothing.deeper() }}")
    with pytest.raises(HypnosError) as caught:
        template.render(chat_input("hi"))
    assert caught.value.status == 400
    assert_clean_message(caught.value.message)
