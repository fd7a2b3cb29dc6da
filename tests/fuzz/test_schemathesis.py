"""Schemathesis over the served OpenAPI schema, against the real server: no 5xx, errors in the spec's shape."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from fuzz_kit import AUTH, Tally, problems
from hypnos_server.openapi import ROUTE_DOCS, RouteDoc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = int(os.environ.get("HYPNOS_FUZZ_EXAMPLES", "50"))  # per operation and generation mode
CONFORMANCE = [status_code_conformance, content_type_conformance, response_headers_conformance,
               response_schema_conformance]  # fmt: skip
MODES = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
# half the generated bodies name a served model of the route's modality, so that cases reach the engines
MODALITY = {"/v1/images/generations": "image_generation", "/v1/images/edits": "image_generation",
            "/v1/embeddings": "embeddings", "/v1/audio/speech": "text_to_speech",
            "/v1/audio/transcriptions": "speech_to_text"}  # fmt: skip


@pytest.fixture(scope="module")
def schema(server: str) -> Any:
    """The schema as the server serves it."""
    return schemathesis.openapi.from_url(f"{server}/schema/openapi.json")


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as http:
        yield http


def _takes_input(path: str, doc: RouteDoc) -> bool:
    """True when the operation has something a negative case can break (body, form, query, headers, path)."""
    return bool(doc.body or doc.form or doc.query or doc.inference or "{" in path)


CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode}")
    for (method, path), doc in sorted(ROUTE_DOCS.items())
    for mode in MODES
    if mode == schemathesis.GenerationMode.POSITIVE or _takes_input(path, doc)
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_operation(
    schema: Any,
    server: str,
    served: dict[str, str],
    session: requests.Session,
    tally: Tally,
    method: str,
    path: str,
    mode: Any,
) -> None:
    """Bounded generated cases for one operation: each answer is checked, every problem reported at once."""
    operation = schema[path][method]
    found: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=operation.as_strategy(generation_mode=mode), swap=st.booleans())
    def run(case: Any, swap: bool) -> None:
        model = served.get(MODALITY.get(path, "text_generation"))
        if swap and model and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = model
        response = case.call(base_url=server, session=session, headers=AUTH, timeout=30)
        headers = {k.lower(): v[0] if isinstance(v, list) else v for k, v in response.headers.items()}
        label = f"{method} {path} {case.body!r:.200}"
        wrong = problems(response.status_code, headers, response.content)
        if mode == schemathesis.GenerationMode.POSITIVE:
            try:
                case.validate_response(response, checks=CONFORMANCE, headers=AUTH)
            except Exception as failure:  # the schema and the answer disagree
                wrong.append(f"does not conform to the schema: {str(failure)[:600]}")
        tally.note("schemathesis", label, response.status_code, wrong)
        found.extend(f"{label}: {problem}" for problem in wrong)

    run()
    assert not found, "\n".join(found[:20])
