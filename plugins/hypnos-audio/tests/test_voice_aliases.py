"""OpenAI's voice names as aliases of a pack's voices (the rules the server once held, now the audio plugin's)."""

from __future__ import annotations

import pytest
from hypnos_audio.voice_aliases import openai_voice_aliases

JA_PACK = ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]


@pytest.mark.parametrize(
    ("voice", "pack", "expected"),
    [
        ("alloy", ["af_alloy", "af_heart"], "af_alloy"),  # Kokoro's id for the name, when the pack has it
        ("alloy", JA_PACK, "jf_alpha"),  # female OpenAI names take the pack's female voices in turn
        ("nova", JA_PACK, "jf_gongitsune"),
        ("shimmer", JA_PACK, "jf_nezumi"),
        ("coral", JA_PACK, "jf_tebukuro"),
        ("sage", JA_PACK, "jf_alpha"),
        ("echo", JA_PACK, "jm_kumo"),  # male names: the male voice
        ("onyx", JA_PACK, "jm_kumo"),
        ("echo", ["en_joe"], "en_joe"),  # a pack without Kokoro-style names: its voices in turn
    ],
)
def test_each_openai_name_is_an_alias_of_a_voice_of_the_pack(voice, pack, expected):
    assert openai_voice_aliases(pack)[voice] == expected


def test_a_name_the_pack_has_itself_and_an_empty_pack_get_no_alias():
    assert "alloy" not in openai_voice_aliases(["alloy", "af_heart"])
    assert openai_voice_aliases([]) == {}
