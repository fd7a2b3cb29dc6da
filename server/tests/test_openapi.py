"""The served OpenAPI schema: at Litestar's default path, open like /health, and complete for every route."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypnos_server.app import HypnosApp
from hypnos_server.openapi import ROUTE_DOCS
from hypnos_server.routes.chat_input import ROLES, THINKING_BUDGETS
from litestar.routes import HTTPRoute
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

KEY = "schema-test-key"


@pytest.fixture(scope="module")
def keyed() -> Iterator[TestClient[HypnosApp]]:
    """A ready app with an API key configured."""
    with TestClient(build_app(config(server={"api_keys": [KEY]}))) as client:
        wait_ready(client)
        yield client


@pytest.fixture(scope="module")
def document(keyed: TestClient[HypnosApp]) -> dict[str, Any]:
    response = keyed.get("/schema/openapi.json")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def _operations(app: HypnosApp) -> set[tuple[str, str]]:
    """(METHOD, path) of every route handler the app serves in its schema."""
    found = set()
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            if handler.resolve_include_in_schema():
                found.update((method, route.path_format) for method in handler.http_methods)
    return found


def test_schema_is_open_without_a_key_like_health(keyed: TestClient[HypnosApp]) -> None:
    assert keyed.get("/v1/models").status_code == 401
    response = keyed.get("/schema/openapi.json")
    assert response.status_code == 200
    assert response.headers["x-request-id"].startswith("req-")
    assert response.json()["openapi"].startswith("3.")


def test_every_route_and_method_is_in_the_schema(keyed: TestClient[HypnosApp], document: dict[str, Any]) -> None:
    operations = _operations(keyed.app)
    assert ("POST", "/v1/chat/completions") in operations and ("GET", "/metrics") in operations
    for method, path in operations:
        assert method.lower() in document["paths"].get(path, {}), f"{method} {path} is missing from the schema"
    served = {(m.upper(), p) for p, item in document["paths"].items() for m in item}
    assert served == operations


def test_every_route_has_its_doc_and_no_doc_is_stale(keyed: TestClient[HypnosApp]) -> None:
    assert _operations(keyed.app) == set(ROUTE_DOCS)


def test_json_bodies_come_from_the_request_structs(document: dict[str, Any]) -> None:
    chat = document["paths"]["/v1/chat/completions"]["post"]
    ref = chat["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/ChatCompletionRequest"
    request = document["components"]["schemas"]["ChatCompletionRequest"]
    assert set(request["required"]) == {"model", "messages"}
    assert "tools" in request["properties"]
    assert "ChatMessage" in document["components"]["schemas"]


def test_closed_vocabularies_are_enums(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert set(schemas["ChatMessage"]["properties"]["role"]["enum"]) == ROLES
    assert schemas["MoeOffloadRequest"]["properties"]["mode"]["enum"] == ["off", "auto", "on"]
    effort = schemas["ChatCompletionRequest"]["properties"]["reasoning_effort"]["anyOf"][0]["enum"]
    assert set(effort) == {"none", *THINKING_BUDGETS}


def test_multipart_routes_describe_their_form(document: dict[str, Any]) -> None:
    transcription = document["paths"]["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]
    assert set(transcription) == {"application/json", "multipart/form-data"}
    form = transcription["multipart/form-data"]["schema"]
    assert form["properties"]["file"] == {"type": "string", "format": "binary"}
    edits = document["paths"]["/v1/images/edits"]["post"]["requestBody"]["content"]
    assert set(edits) == {"multipart/form-data"}
    assert {"model", "prompt", "image"} <= set(edits["multipart/form-data"]["schema"]["required"])


def test_streaming_and_audio_answers(document: dict[str, Any]) -> None:
    chat_ok = document["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert set(chat_ok) == {"application/json", "text/event-stream"}
    speech_ok = document["paths"]["/v1/audio/speech"]["post"]["responses"]["200"]["content"]
    assert set(speech_ok) == {"audio/wav", "audio/pcm"}


def test_errors_use_the_spec_body_and_carry_the_request_id(document: dict[str, Any]) -> None:
    error = document["components"]["schemas"]["ErrorDetail"]
    assert set(error["required"]) == {"message", "type"}
    responses = document["paths"]["/v1/embeddings"]["post"]["responses"]
    assert {"400", "401", "404", "429", "503", "507"} <= set(responses)
    assert responses["404"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ErrorBody"
    assert set(responses["413"]["content"]) == {"text/plain"}  # JSON body: the body-limit layer's plain text
    edits = document["paths"]["/v1/images/edits"]["post"]["responses"]
    assert set(edits["413"]["content"]) == {"application/json"}  # multipart: the JSON error naming the limit
    for item in document["paths"].values():
        for operation in item.values():
            for answer in operation["responses"].values():
                assert "x-request-id" in answer["headers"]


def test_the_bearer_scheme_covers_v1_only(document: dict[str, Any]) -> None:
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "Needed on /v1/* when the server has API keys",
    }
    assert document["paths"]["/v1/memory/status"]["get"]["security"] == [{"bearer": []}]
    assert document["paths"]["/health"]["get"]["security"] == []
    assert "401" not in document["paths"]["/ready"]["get"]["responses"]


def test_inference_routes_document_the_hypnos_headers(document: dict[str, Any]) -> None:
    names = {p["name"] for p in document["paths"]["/v1/chat/completions"]["post"]["parameters"]}
    assert {"x-hypnos-deadline-ms", "x-hypnos-next-model", "x-hypnos-workflow"} <= names
    log_query = {p["name"] for p in document["paths"]["/v1/logs"]["get"]["parameters"]}
    assert log_query == {"model", "route", "status", "key", "limit"}


def test_unknown_schema_pages_answer_the_spec_404(keyed: TestClient[HypnosApp]) -> None:
    response = keyed.get("/schema/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"


def test_pool_changes_answer_201_and_need_an_admin_key(document: dict[str, Any]) -> None:
    added = document["paths"]["/v1/models"]["post"]["responses"]
    assert "201" in added and "200" not in added and "403" in added
    assert "403" in document["paths"]["/v1/models/{model_id}"]["delete"]["responses"]


def test_every_admin_route_documents_its_403(keyed: TestClient[HypnosApp], document: dict[str, Any]) -> None:
    from hypnos_server.asgi.auth import AdminRoutes

    needs_admin = AdminRoutes.of(keyed.app).needs_admin
    admin = [
        (method, path)
        for path, operations in document["paths"].items()
        for method in operations
        if needs_admin(method.upper(), path.replace("{model_id}", "m"))
    ]
    assert len(admin) == 10
    assert [pair for pair in admin if "403" not in document["paths"][pair[1]][pair[0]]["responses"]] == []
