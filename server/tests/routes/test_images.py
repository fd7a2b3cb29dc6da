"""POST /v1/images/generations and POST /v1/images/edits."""

from __future__ import annotations

import base64
import struct

import pytest
from server_kit import error_of


def png_size(b64: str) -> tuple[int, int]:
    data = base64.b64decode(b64)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_generation_shape_and_seeds(client):
    response = client.post(
        "/v1/images/generations", json={"model": "fake-image", "prompt": "a fox", "n": 2, "size": "256x256", "seed": 7}
    )
    assert response.status_code == 200
    body = response.json()
    assert isinstance(body["created"], int) and "hypnos_telemetry" in body
    assert [item["seed"] for item in body["data"]] == [7, 8]
    assert all(png_size(item["b64_json"]) == (256, 256) for item in body["data"])


@pytest.mark.parametrize(("size", "expected"), [("1000x700", (992, 688)), ("100x5000", (256, 2048))])
def test_size_is_clamped_and_rounded(client, size, expected):
    body = client.post("/v1/images/generations", json={"model": "fake-image", "prompt": "x", "size": size}).json()
    assert png_size(body["data"][0]["b64_json"]) == expected


def test_seed_defaults_to_random(client):
    request = {"model": "fake-image", "prompt": "x", "size": "256x256"}
    answers = [client.post("/v1/images/generations", json=request).json()["data"][0] for _ in range(4)]
    seeds = [answer["seed"] for answer in answers]
    assert len(set(seeds)) > 1 and all(0 <= seed < 2**32 for seed in seeds)
    again = client.post("/v1/images/generations", json={**request, "seed": seeds[0]}).json()["data"][0]
    assert again == answers[0]  # the seed it reports reproduces the image


@pytest.mark.parametrize("patch", [{"n": 5}, {"n": 0}, {"size": "big"}, {"prompt": ""}])
def test_invalid_generation_is_400(client, patch):
    response = client.post("/v1/images/generations", json={"model": "fake-image", "prompt": "x", **patch})
    assert response.status_code == 400
    assert error_of(response)["type"] == "invalid_request_error"


def test_edit_multipart(client):
    png = base64.b64decode(
        client.post("/v1/images/generations", json={"model": "fake-image", "prompt": "x", "size": "256x256"}).json()[
            "data"
        ][0]["b64_json"]
    )
    response = client.post(
        "/v1/images/edits",
        files=[("image", ("a.png", png, "image/png")), ("image[]", ("b.png", png, "image/png"))],
        data={"model": "fake-image", "prompt": "add a scarf", "size": "320x256", "seed": "3", "n": "1"},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["data"][0]["seed"] == 3
    assert png_size(body["data"][0]["b64_json"]) == (320, 256)


def test_edit_refusals(client):
    files = [("image", ("a.png", b"png", "image/png"))]
    no_edit = client.post("/v1/images/edits", files=files, data={"model": "fake-chat", "prompt": "x"})
    assert no_edit.status_code == 400
    mask = client.post(
        "/v1/images/edits",
        files=[*files, ("mask", ("m.png", b"m", "image/png"))],
        data={"model": "fake-image", "prompt": "x"},
    )
    assert mask.status_code == 400 and "mask" in error_of(mask)["message"]
    no_image = client.post(
        "/v1/images/edits", files=[("other", ("a", b"1"))], data={"model": "fake-image", "prompt": "x"}
    )
    assert no_image.status_code == 400 and "image" in error_of(no_image)["message"]
