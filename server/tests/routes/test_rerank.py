"""POST /v1/rerank over the fake engine: the Cohere / Jina shape, top_n, return_documents, errors, tokens charged."""

from __future__ import annotations

from litestar.testing import TestClient
from server_kit import build_app, config, error_of, wait_ready

DOCS = ["the cat sat", {"text": "a red cat and a dog"}, "nothing here"]


def test_results_are_best_first_with_index_and_relevance_score() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        body = {"model": "fake-embed", "query": "red cat", "documents": DOCS, "top_n": 2, "return_documents": True}
        response = client.post("/v1/rerank", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert [r["index"] for r in answer["results"]] == [1, 0]
        assert answer["results"][0]["relevance_score"] > answer["results"][1]["relevance_score"]
        assert answer["results"][0]["document"] == {"text": "a red cat and a dog"}
        assert answer["usage"]["prompt_tokens"] > 0 and "hypnos_telemetry" in answer
        plain = client.post("/v1/rerank", json={"model": "fake-embed", "query": "red cat", "documents": DOCS}).json()
        assert len(plain["results"]) == 3 and "document" not in plain["results"][0]


def test_bad_requests_are_400s_and_a_chat_model_refuses() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        for body in (
            {"model": "fake-embed", "query": "q", "documents": []},
            {"model": "fake-embed", "query": "q", "documents": [{"title": "x"}]},
            {"model": "fake-embed", "query": "q", "documents": ["a"], "top_n": 0},
            {"model": "fake-embed", "documents": ["a"]},
        ):
            response = client.post("/v1/rerank", json=body)
            assert response.status_code == 400 and error_of(response)["type"] == "invalid_request_error", body
        assert client.post("/v1/rerank", json={"model": "nope", "query": "q", "documents": ["a"]}).status_code == 404


def test_a_keys_daily_tokens_count_rerank() -> None:
    keys = [{"key": "k", "label": "ranker", "tokens_per_day": 5}]
    with TestClient(build_app(config(server={"keys": keys}))) as client:
        wait_ready(client)
        headers = {"authorization": "Bearer k"}
        body = {"model": "fake-embed", "query": "red cat", "documents": DOCS}
        assert client.post("/v1/rerank", json=body, headers=headers).status_code == 200
        refused = client.post("/v1/rerank", json=body, headers=headers)
        assert refused.status_code == 429 and error_of(refused)["code"] == "tokens_per_day"


def test_cohere_v2_path_answers_as_litellm_posts_it() -> None:
    # the body litellm's cohere provider (CohereRerankV2Config) posts: return_documents defaults to true there, and
    # v2's max_tokens_per_doc / rank_fields are sent when set
    body = {
        "model": "fake-embed",
        "query": "red cat",
        "documents": ["the cat sat", "a red cat and a dog", "nothing here"],
        "top_n": 2,
        "return_documents": True,
        "max_tokens_per_doc": 4096,
        "rank_fields": ["text"],
    }
    with TestClient(build_app()) as client:
        wait_ready(client)
        response = client.post("/v2/rerank", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert [r["index"] for r in answer["results"]] == [1, 0]
        assert answer["results"][0]["document"] == {"text": "a red cat and a dog"}
        assert answer["id"] == response.headers["x-request-id"]
        meta = answer["meta"]
        assert meta["api_version"]["version"] == "2" and meta["billed_units"] == {"search_units": 1}
        assert meta["tokens"]["input_tokens"] == answer["usage"]["prompt_tokens"] > 0
        v1 = client.post("/v1/rerank", json=body).json()
        assert [(r["index"], r["relevance_score"]) for r in v1["results"]] == [
            (r["index"], r["relevance_score"]) for r in answer["results"]
        ]
        bare = client.post("/rerank", json=body)  # vLLM's and llama.cpp's path (litellm's hosted_vllm posts there)
        assert bare.status_code == 200 and bare.json()["results"] == v1["results"]


def test_cohere_v2_errors_are_cohere_shaped_400s_and_404s() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        for body in (
            {"model": "fake-embed", "query": "q", "documents": []},
            {"model": "fake-embed", "query": "q", "documents": ["a"], "top_n": 0},
            {"model": "fake-embed", "documents": ["a"]},
        ):
            response = client.post("/v2/rerank", json=body)
            assert response.status_code == 400, body
            answer = response.json()  # Cohere's message, and the spec's error object beside it
            assert answer["message"] and answer["error"]["message"] == answer["message"], response.text
            assert answer["error"]["type"] == "invalid_request_error"
        missing = client.post("/v2/rerank", json={"model": "nope", "query": "q", "documents": ["a"]})
        assert missing.status_code == 404 and "nope" in missing.json()["message"]


def test_documents_are_capped_in_count_and_in_characters() -> None:
    with TestClient(build_app(config(limits={"max_rerank_documents": 50, "max_prompt_chars": 2000}))) as client:
        wait_ready(client)
        many = client.post("/v1/rerank", json={"model": "fake-embed", "query": "q", "documents": ["d"] * 51})
        assert many.status_code == 400 and "max_rerank_documents (50)" in error_of(many)["message"]
        long = client.post("/v1/rerank", json={"model": "fake-embed", "query": "q", "documents": ["d" * 1000] * 3})
        assert long.status_code == 400 and "max_prompt_chars (2000)" in error_of(long)["message"]
        fits = client.post("/v1/rerank", json={"model": "fake-embed", "query": "q", "documents": ["d"] * 50})
        assert fits.status_code == 200
