"""The realtime pieces on their own: phrase cutting, the energy VAD, truncation."""

from __future__ import annotations

from hypnos_server.realtime.conversation import Item
from hypnos_server.realtime.phrases import MAX_PHRASE_CHARS, PhraseSplitter
from hypnos_server.realtime.vad import PAUSE_MS, EnergyDetector, TurnSegmenter
from realtime_kit import tone


def _split(pieces: list[str]) -> list[str]:
    splitter = PhraseSplitter()
    phrases = [phrase for piece in pieces for phrase in splitter.feed(piece)]
    rest = splitter.flush()
    return phrases + ([rest] if rest else [])


def test_phrases_end_at_sentences_and_long_clauses() -> None:
    assert _split(["Hello", " there! How are", " you today? Fine"]) == ["Hello there!", "How are you today?", "Fine"]
    clause = "When the weather is cold and wet, take a coat"
    assert _split([clause]) == ["When the weather is cold and wet,", "take a coat"]
    assert _split(["Yes, I do."]) == ["Yes, I do."]  # a short clause is not cut
    # the first clause may be shorter than the later ones: speech starts sooner
    answer = "Plants use sunlight, water, and air. They grow roots, stems and leaves, then flowers."
    assert _split([answer]) == [
        "Plants use sunlight,",
        "water, and air.",
        "They grow roots, stems and leaves,",
        "then flowers.",
    ]
    splitter = PhraseSplitter()  # a comma after a word ends the clause when it arrives, not with the next token
    assert splitter.feed("Plants use sunlight") == [] and splitter.feed(",") == ["Plants use sunlight,"]
    assert splitter.feed(" It costs 1") == [] and splitter.feed(",") == [] and splitter.feed("000 dollars.") == []


def test_phrases_never_cut_inside_numbers_or_urls() -> None:
    text = "Pi is about 3.14159 today. See https://example.com/a.b?c=1,2 for the rest, it explains it all."
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]  # streamed in small pieces
    assert _split(pieces) == [
        "Pi is about 3.14159 today.",
        "See https://example.com/a.b?c=1,2 for the rest,",
        "it explains it all.",
    ]
    assert _split(["1. 2. Go"]) == ["1. 2. Go"]  # too short to stand alone


def test_a_run_on_answer_is_cut_at_a_space() -> None:
    words = ["word"] * 100
    phrases = _split([" ".join(words)])
    assert all(len(phrase) <= MAX_PHRASE_CHARS for phrase in phrases) and len(phrases) > 1
    assert " ".join(phrases).split() == words


def test_energy_vad_finds_the_turn() -> None:
    segmenter = TurnSegmenter(EnergyDetector(0.5), 24000, silence_ms=300)
    events = segmenter.feed(tone(200, 0)) + segmenter.feed(tone(500)) + segmenter.feed(tone(400, 0))
    assert [(event.kind, event.at_ms) for event in events] == [
        ("started", 200),
        ("paused", 700 + PAUSE_MS),
        ("stopped", 1000),
    ]
    segmenter = TurnSegmenter(EnergyDetector(0.5), 24000, silence_ms=500)  # a pause, then the speech goes on
    events = segmenter.feed(tone(300) + tone(300, 0) + tone(200) + tone(600, 0))
    kinds = [(event.kind, event.at_ms) for event in events]
    assert kinds == [
        ("started", 0),
        ("paused", 300 + PAUSE_MS),
        ("resumed", 620),
        ("paused", 800 + PAUSE_MS),
        ("stopped", 1300),
    ]
    assert TurnSegmenter(EnergyDetector(0.5), 24000, 300).feed(tone(1000, 50)) == []  # too quiet to be speech
    assert TurnSegmenter(EnergyDetector(0.5), 24000, 300).feed(tone(20)) == []  # one loud frame is a click


def test_truncate_keeps_what_was_heard() -> None:
    item = Item(type="message", role="assistant", audio=True, text="one two. three four five six.")
    item.spoken = [("one two.", 200.0), ("three four five six.", 600.0)]
    item.truncate(400.0)
    assert item.text == "one two. three four"
    assert item.status == "incomplete"
