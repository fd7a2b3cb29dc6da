"""POST /v1/embeddings."""

from __future__ import annotations

from server_kit import error_of


def test_vectors_in_input_order(client):
    response = client.post("/v1/embeddings", json={"model": "fake-embed", "input": ["first text", "second"]})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list" and body["model"] == "fake-embed"
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 16 for d in body["data"])
    assert body["data"][0]["embedding"] != body["data"][1]["embedding"]
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert "hypnos_telemetry" in body


def test_single_string_input(client):
    body = client.post(
        "/v1/embeddings", json={"model": "fake-embed", "input": "one", "encoding_format": "float"}
    ).json()
    assert len(body["data"]) == 1


def test_empty_input_is_400(client):
    response = client.post("/v1/embeddings", json={"model": "fake-embed", "input": []})
    assert response.status_code == 400
    assert "input" in error_of(response)["message"]


def test_wrong_input_type_names_the_field(client):
    response = client.post("/v1/embeddings", json={"model": "fake-embed", "input": 5})
    assert response.status_code == 400
    assert "`input`" in error_of(response)["message"]


def test_base64_encoding_decodes_to_the_float_vectors(client):
    """The OpenAI Node SDK asks for base64 by default and reads little-endian float32 from it."""
    import base64
    import struct

    texts = ["first text", "second"]
    floats = client.post("/v1/embeddings", json={"model": "fake-embed", "input": texts}).json()
    encoded = client.post(
        "/v1/embeddings", json={"model": "fake-embed", "input": texts, "encoding_format": "base64"}
    ).json()
    for plain, packed in zip(floats["data"], encoded["data"], strict=True):
        assert isinstance(packed["embedding"], str)
        raw = base64.b64decode(packed["embedding"])
        assert len(raw) == 4 * len(plain["embedding"])
        decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
        for got, want in zip(decoded, plain["embedding"], strict=True):
            assert abs(got - want) <= 1e-6 * max(1.0, abs(want))


def test_unknown_encoding_format_is_400(client):
    response = client.post("/v1/embeddings", json={"model": "fake-embed", "input": "one", "encoding_format": "int8"})
    assert response.status_code == 400
    assert "encoding_format" in error_of(response)["message"]


def test_token_id_inputs_are_accepted_and_mixed_inputs_refused(client):
    one = client.post("/v1/embeddings", json={"model": "fake-embed", "input": [1, 2, 3]})
    assert one.status_code == 200 and len(one.json()["data"]) == 1
    many = client.post("/v1/embeddings", json={"model": "fake-embed", "input": [[1, 2], [3]]})
    assert many.status_code == 200 and len(many.json()["data"]) == 2
    for bad in (["text", 3], [[1], "text"], [[]]):
        refused = client.post("/v1/embeddings", json={"model": "fake-embed", "input": bad})
        assert refused.status_code == 400 and "input" in error_of(refused)["message"]


def test_dimensions_on_a_model_not_trained_for_it_is_400(client):
    response = client.post("/v1/embeddings", json={"model": "fake-embed", "input": "x", "dimensions": 8})
    assert response.status_code == 400 and "dimensions" in error_of(response)["message"]
