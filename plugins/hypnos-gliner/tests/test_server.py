"""POST /v1/entities through a real server (granian subprocess) over the tiny GLiNER, ONNX Runtime and torch."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.model

MODELS = ("gliner-onnx", "gliner-torch")
LABELS = ["person", "city", "company", "product"]
EXAMPLE = ["Mario Rossi works in Milan for Ferrari.", "Tim Cook announced the iPhone 17 in Cupertino."]
ASTRAL = (
    "😀 Zoë met 🇮🇹 Mario Rossi in Zürich \U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522"
    " café 🎉 then flew to São Paulo with 👩‍👩‍👧 Ana Müller."
)
THIRTY = (
    "person city company product date country animal food color sport planet river language event organization "
    "vehicle instrument disease drug building mountain song book movie award currency element weapon tool game"
).split()


def entities(client: Any, **body: Any) -> dict[str, Any]:
    """A successful /v1/entities answer."""
    response = client.post("/v1/entities", json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def spans(answer: dict[str, Any], index: int = 0) -> list[tuple[int, int, str, float]]:
    """(start, end, label, score) of one text's entities."""
    return [(e["start"], e["end"], e["label"], e["score"]) for e in answer["data"][index]["entities"]]


def overlap(a: tuple[int, int, str, float], b: tuple[int, int, str, float], flat: bool) -> bool:
    """Whether two spans may not both be kept (flat: any overlap; nested: a partial overlap or the same span)."""
    if (a[0], a[1]) == (b[0], b[1]):
        return True
    if a[0] >= b[1] or b[0] >= a[1]:
        return False
    return flat or not ((a[0] <= b[0] and a[1] >= b[1]) or (b[0] <= a[0] and b[1] >= a[1]))


@pytest.mark.parametrize("model", MODELS)
def test_response_shape(client: Any, model: str) -> None:
    response = client.post(
        "/v1/entities", json={"model": model, "input": EXAMPLE, "labels": LABELS, "threshold": 0.5, "flat": True}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-request-id"].startswith("req-")
    answer = response.json()
    assert answer["object"] == "list" and answer["model"] == model
    assert [(d["object"], d["index"]) for d in answer["data"]] == [("entities", 0), ("entities", 1)]
    assert answer["usage"] == {"texts": 2, "characters": sum(len(text) for text in EXAMPLE)}
    assert {"previous_tier", "tier_switch_latency_ms", "inference_latency_ms"} <= set(answer["hypnos_telemetry"])
    found = [e for d in answer["data"] for e in d["entities"]]
    assert found, "the tiny model finds spans above 0.5 in these texts"
    for data, text in zip(answer["data"], EXAMPLE, strict=True):
        for entity in data["entities"]:
            assert set(entity) == {"text", "label", "start", "end", "score"}
            assert entity["text"] == text[entity["start"] : entity["end"]]
            assert entity["label"] in LABELS and 0.5 <= entity["score"] <= 1.0


@pytest.mark.parametrize("model", MODELS)
def test_one_pass_is_what_gliner_gives(client: Any, reference: Any, model: str) -> None:
    for flat in (True, False):
        answer = entities(client, model=model, input=EXAMPLE[0], labels=LABELS, threshold=0.4, flat=flat)
        expected = reference.predict_entities(EXAMPLE[0], LABELS, threshold=0.4, flat_ner=flat)
        got = spans(answer)
        assert [(s, e, label) for s, e, label, _ in got] == [(x["start"], x["end"], x["label"]) for x in expected]
        assert [score for *_, score in got] == pytest.approx([x["score"] for x in expected], abs=1e-4)


@pytest.mark.parametrize("model", MODELS)
def test_offsets_count_unicode_scalar_values(client: Any, reference: Any, model: str) -> None:
    answer = entities(client, model=model, input=[ASTRAL, "ok " + ASTRAL], labels=LABELS, threshold=0.3, flat=False)
    assert answer["usage"]["characters"] == 2 * len(ASTRAL) + 3
    for index, text in enumerate([ASTRAL, "ok " + ASTRAL]):
        found = answer["data"][index]["entities"]
        assert any(e["start"] > text.index("🎉") for e in found), "spans after astral characters"
        for entity in found:
            assert entity["text"] == text[entity["start"] : entity["end"]]
    expected = reference.predict_entities(ASTRAL, LABELS, threshold=0.3, flat_ner=False)
    assert [(s, e) for s, e, *_ in spans(answer)] == [(x["start"], x["end"]) for x in expected]


@pytest.mark.parametrize("flat", [True, False])
def test_thirty_labels_equal_the_union_of_their_families(client: Any, flat: bool) -> None:
    text = " ".join([*EXAMPLE, "The cat ate pizza near the Nile on Monday while reading Dune with a hammer."])
    body = {"model": "gliner-onnx", "input": text, "threshold": 0.5, "flat": flat}
    whole = spans(entities(client, **body, labels=THIRTY))
    families = [spans(entities(client, **body, labels=THIRTY[i : i + 8])) for i in range(0, 30, 8)]
    union = [span for family in families for span in family]
    assert len({label for *_, label, _ in whole}) > 1, "the answer mixes labels of several families"
    for span in whole:  # every answer span is a family's span, with the family's score
        match = [u for u in union if u[:3] == span[:3]]
        assert len(match) == 1 and match[0][3] == pytest.approx(span[3], abs=1e-5)
    for span in union:  # every family span left out lost to an answer span at least as good
        if not any(w[:3] == span[:3] for w in whole):
            assert any(overlap(span, w, flat) and w[3] >= span[3] - 1e-5 for w in whole), span
    assert not any(overlap(a, b, flat) for i, a in enumerate(whole) for b in whole[i + 1 :])


def long_text(words: int) -> str:
    """A reproducible text of `words` words with names, punctuation, accents and emoji."""
    vocabulary = (
        "Mario Rossi works in Milan for Ferrari. Zoë visited São Paulo 😀 and the iPhone 17 launch at Cupertino, "
        "with Tim Cook."
    ).split()
    chooser = random.Random(5)
    return " ".join(chooser.choice(vocabulary) for _ in range(words))


@pytest.mark.parametrize("flat", [True, False])
def test_a_5000_word_text_is_windowed_and_spans_lie_inside_it(client: Any, flat: bool) -> None:
    text = long_text(5000)
    found = spans(entities(client, model="gliner-onnx", input=text, labels=LABELS, threshold=0.6, flat=flat))
    words_end_of_first_window = len(" ".join(text.split(" ")[:384]))
    assert any(start > words_end_of_first_window for start, *_ in found), "spans past the first window"
    assert max(end for _, end, *_ in found) > len(text) - 200, "spans up to the end of the text"
    for start, end, _, _ in found:
        assert 0 <= start < end <= len(text) and text[start:end].strip() == text[start:end]
    assert len({(s, e) for s, e, *_ in found}) == len(found), "each span once, across window seams too"
    assert not any(overlap(a, b, flat) for i, a in enumerate(found) for b in found[i + 1 : i + 50])


def test_flat_and_nested(client: Any) -> None:
    body = {"model": "gliner-torch", "input": ASTRAL, "labels": LABELS, "threshold": 0.3}
    flat = spans(entities(client, **body, flat=True))
    nested = spans(entities(client, **body, flat=False))
    assert flat and not any(overlap(a, b, True) for i, a in enumerate(flat) for b in flat[i + 1 :])
    assert not any(overlap(a, b, False) for i, a in enumerate(nested) for b in nested[i + 1 :])
    assert any(a[0] <= b[0] and b[1] <= a[1] for a in nested for b in nested if a != b), "nested spans kept"
    assert len(nested) > len(flat)
    default = spans(entities(client, **body))
    assert default == flat, "the model's default is flat"


def test_texts_of_concurrent_requests_answer_as_alone(client: Any) -> None:
    texts = [long_text(40 + 7 * i) for i in range(12)]
    alone = [spans(entities(client, model="gliner-torch", input=t, labels=LABELS, threshold=0.5)) for t in texts]
    with ThreadPoolExecutor(12) as pool:
        together = list(
            pool.map(
                lambda t: spans(entities(client, model="gliner-torch", input=t, labels=LABELS, threshold=0.5)), texts
            )
        )
    for one, other in zip(alone, together, strict=True):
        assert [s[:3] for s in one] == [s[:3] for s in other]
        assert [s[3] for s in one] == pytest.approx([s[3] for s in other], abs=1e-4)
    batch = entities(client, model="gliner-torch", input=texts, labels=LABELS, threshold=0.5)
    for index, one in enumerate(alone):
        assert [s[:3] for s in spans(batch, index)] == [s[:3] for s in one]
        assert [s[3] for s in spans(batch, index)] == pytest.approx([s[3] for s in one], abs=1e-4)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"labels": []}, "labels"),
        ({"labels": ["person", " "]}, "labels"),
        ({"labels": None}, "labels"),
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["fine", ""]}, "input[1]"),
        ({"threshold": -0.1}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"flat": "yes"}, "flat"),
    ],
)
def test_bad_requests_answer_400(client: Any, change: dict[str, Any], words: str) -> None:
    body = {"model": "gliner-onnx", "input": "Mario works in Milan.", "labels": LABELS, **change}
    body = {key: value for key, value in body.items() if value is not None}
    response = client.post("/v1/entities", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and words in error["message"]


def test_unknown_fields_are_ignored_and_unknown_models_are_404(client: Any) -> None:
    body = {"model": "gliner-onnx", "input": "Mario works in Milan.", "labels": LABELS, "mode": "fast", "extra": {}}
    assert client.post("/v1/entities", json=body).status_code == 200
    response = client.post("/v1/entities", json={**body, "model": "no-such-model"})
    assert response.status_code == 404 and response.json()["error"]["type"] == "model_not_found"


def test_the_route_is_guarded_by_keys_and_key_limits(base_url: str, limited_key: str) -> None:
    body = {"model": "gliner-onnx", "input": "Mario works in Milan.", "labels": LABELS}
    anonymous = httpx.post(f"{base_url}/v1/entities", json=body, timeout=60)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "invalid_api_key"
    headers = {"Authorization": f"Bearer {limited_key}"}
    assert httpx.post(f"{base_url}/v1/entities", json=body, headers=headers, timeout=60).status_code == 200
    second = httpx.post(f"{base_url}/v1/entities", json=body, headers=headers, timeout=60)
    assert second.status_code == 429 and second.json()["error"]["code"] == "requests_per_minute"
    assert "retry-after" in second.headers
