"""OpenAI's voice names as aliases of a model's voices (the capabilities' voice_aliases): Kokoro's ids where the pack
has them, else the pack's voices of the same gender in turn."""

from __future__ import annotations

from types import MappingProxyType

# OpenAI's voice names and the Kokoro voice each stands for (its id's second letter is the gender: f or m)
OPENAI_VOICES = MappingProxyType(
    {
        "alloy": "af_alloy",
        "echo": "am_echo",
        "fable": "bm_fable",
        "onyx": "am_onyx",
        "nova": "af_nova",
        "shimmer": "af_bella",
        "coral": "af_bella",
        "ash": "am_adam",
        "sage": "af_sarah",
        "ballad": "bm_george",
        "verse": "am_michael",
    }
)


def _gender(voice: str) -> str | None:
    """A Kokoro-style id's gender letter (`af_heart`: f), None for another name."""
    return voice[1] if len(voice) > 3 and voice[2] == "_" else None


def openai_voice_aliases(pack: list[str]) -> dict[str, str]:
    """Each OpenAI voice name's voice in this pack: its Kokoro id when the pack has it, else the pack's voices of its
    gender in turn (alloy, nova, ... -> the 1st, 2nd, ... female voice), else the pack's voices in turn. The names the
    pack has as voices of its own are left to them."""
    if not pack:
        return {}
    aliases = {}
    for name, kokoro in OPENAI_VOICES.items():
        if name in pack:
            continue
        if kokoro in pack:
            aliases[name] = kokoro
            continue
        gender = kokoro[1]
        same = [voice for voice in pack if _gender(voice) == gender] or pack
        rank = [other for other, id_ in OPENAI_VOICES.items() if id_[1] == gender].index(name)
        aliases[name] = same[rank % len(same)]
    return aliases
