"""Piper streams by sentence: the first sentence's audio is handed out before the next one is synthesized."""

from __future__ import annotations

import pytest
from hypnos.config import Settings
from hypnos.engine import CancelToken, SpeechInput
from hypnos.types import LayerPlacementPlan, MemoryTier

from .conftest import make_engine

pytestmark = pytest.mark.model

SIX_SENTENCES = "The sun is up. Birds sing. We walk. The park is green. We sit down. Then we go home."


async def test_the_first_sentence_comes_out_before_the_rest_is_synthesized(starter_settings: Settings) -> None:
    engine = make_engine(starter_settings, "piper-joe")
    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    try:
        seen = []
        async for chunk in engine.speak(SpeechInput(text=SIX_SENTENCES, voice="alloy"), CancelToken()):
            seen.append(engine.sentences_synthesized)
            assert chunk.sample_rate == 24000 and chunk.pcm16
        assert len(seen) == 6 and seen == [1, 2, 3, 4, 5, 6]  # each handed out as soon as it was made

        cancel = CancelToken()
        before = engine.sentences_synthesized
        async for _ in engine.speak(SpeechInput(text=SIX_SENTENCES, voice="alloy"), cancel):
            cancel.cancel()  # a client that leaves after the first sentence costs no more synthesis
        assert engine.sentences_synthesized - before == 1
    finally:
        await engine.unload()
